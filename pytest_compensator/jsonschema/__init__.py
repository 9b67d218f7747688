"""Hypothesis strategies from the JSON Schema subset that MCP tool input schemas use.

hypothesis-jsonschema 0.23 (its latest release) drives Hypothesis internals that current
Hypothesis no longer has and fails on every object schema, so the plugin carries this small
converter instead. Unsupported keywords raise `UnsupportedSchema` naming the keyword and the fix.

Every value drawn is valid under the schema with Draft 2020-12 semantics: `allOf` parts and the
siblings of a `$ref` are merged keyword by keyword, a recursive `$ref` is unrolled a few levels
deep, and the few combinations without an exact generator (`oneOf`, two `anyOf`s, a float
`multipleOf`, `enum` next to other keywords, ...) are checked with a `jsonschema` validator.
A schema that no value satisfies raises `UnsupportedSchema` saying why.
"""

from __future__ import annotations

from .convert import from_schema
from .vocabulary import UnsupportedSchema

__all__ = ["UnsupportedSchema", "from_schema"]
