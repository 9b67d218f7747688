"""`compensator infer`: undo policies found by experiment on the real servers, and written
only once the plugin's own round trips have proven them.

`candidates` builds what to try from names, schemas and sample results (pure); `proof` runs
the plugin's checks on candidate registries; `engine` orders the work; `writing` adds the
result to the person's registry file; `progress` counts the examples of the check under
way. The CLI front is `compensator/cli/infer.py`.
"""

from .engine import Inference, check_output_folder
from .outcomes import Outcome, Report
from .progress import Ticker
from .writing import InferError, add_to_tools, comment_lines, entry_lines, verify_result

__all__ = [
    "InferError",
    "Inference",
    "Outcome",
    "Report",
    "Ticker",
    "add_to_tools",
    "check_output_folder",
    "comment_lines",
    "entry_lines",
    "verify_result",
]
