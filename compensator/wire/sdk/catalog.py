"""Resources, prompts and completion on the proxy's server: the handlers of
compensator/wire/catalog.py installed in SDK-neutral signatures, on both SDK lines."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import mcp.types as types
from mcp.server.lowlevel import Server

from .base import MCP2, types_v1

__all__ = ["CatalogHandlers", "PageLister", "PromptGetter", "add_catalog"]

PageLister = Callable[[str | None], Awaitable[Any]]
PromptGetter = Callable[[str, dict[str, str] | None], Awaitable[types.GetPromptResult]]


@dataclass(frozen=True, kw_only=True)
class CatalogHandlers:
    """The proxy's resource, prompt and completion handlers, in SDK-neutral signatures.

    Listers take the client's cursor; `read_resource` the URI; `subscribe_resource` and
    `unsubscribe_resource` the URI and the client's session (to send
    `notifications/resources/updated` on later); `get_prompt` the name and arguments;
    `complete` the request's params as a wire dict (`ref`, `argument`, `context`). Results are
    the SDK's result models. The flags set the advertised `resources.subscribe`,
    `resources.listChanged` and `prompts.listChanged` (`ProxyServer`, server.py)."""

    list_resources: PageLister | None = None
    list_resource_templates: PageLister | None = None
    read_resource: Callable[[str], Awaitable[types.ReadResourceResult]] | None = None
    subscribe_resource: Callable[[str, Any], Awaitable[None]] | None = None
    unsubscribe_resource: Callable[[str, Any], Awaitable[None]] | None = None
    list_prompts: PageLister | None = None
    get_prompt: PromptGetter | None = None
    complete: Callable[[dict[str, Any]], Awaitable[types.CompleteResult]] | None = None
    resources_subscribe: bool = False
    resources_list_changed: bool = False
    prompts_list_changed: bool = False


def add_catalog(server: Server[Any], handlers: CatalogHandlers) -> None:
    if MCP2:
        _add_catalog_v2(server, handlers)
    else:  # pragma: no cover - 1.x only
        _add_catalog_v1(server, handlers)


def _cursor(params: Any) -> str | None:
    cursor: str | None = getattr(params, "cursor", None) if params is not None else None
    return cursor


def _add_catalog_v2(server: Server[Any], h: CatalogHandlers) -> None:
    add = server.add_request_handler

    def lister(method: str, handler: PageLister | None) -> None:
        if handler is None:
            return

        async def on_list(ctx: Any, params: Any) -> Any:
            return await handler(_cursor(params))

        add(method, types.PaginatedRequestParams, on_list)

    lister("resources/list", h.list_resources)
    lister("resources/templates/list", h.list_resource_templates)
    lister("prompts/list", h.list_prompts)
    read, get, complete = h.read_resource, h.get_prompt, h.complete
    if read is not None:

        async def on_read(ctx: Any, params: Any) -> Any:
            return await read(str(params.uri))

        add("resources/read", types.ReadResourceRequestParams, on_read)
    for method, params_type, handler in (
        ("resources/subscribe", types.SubscribeRequestParams, h.subscribe_resource),
        ("resources/unsubscribe", types.UnsubscribeRequestParams, h.unsubscribe_resource),
    ):
        if handler is not None:
            add(method, params_type, _v2_subscriber(handler))
    if get is not None:

        async def on_get(ctx: Any, params: Any) -> Any:
            return await get(params.name, params.arguments)

        add("prompts/get", types.GetPromptRequestParams, on_get)
    if complete is not None:

        async def on_complete(ctx: Any, params: Any) -> Any:
            return await complete(params.model_dump(by_alias=True, mode="json", exclude_none=True))

        add("completion/complete", types.CompleteRequestParams, on_complete)


def _v2_subscriber(handler: Callable[[str, Any], Awaitable[None]]) -> Any:
    async def on_subscription(ctx: Any, params: Any) -> Any:
        await handler(str(params.uri), ctx.session)
        return types.EmptyResult()

    return on_subscription


def _add_catalog_v1(server: Any, h: CatalogHandlers) -> None:  # pragma: no cover
    handlers = server.request_handlers

    def lister(request_type: Any, handler: PageLister | None) -> None:
        if handler is None:
            return

        async def on_list(request: Any) -> Any:
            return types_v1.ServerResult(await handler(_cursor(request.params)))

        handlers[request_type] = on_list

    lister(types_v1.ListResourcesRequest, h.list_resources)
    lister(types_v1.ListResourceTemplatesRequest, h.list_resource_templates)
    lister(types_v1.ListPromptsRequest, h.list_prompts)
    read, get, complete = h.read_resource, h.get_prompt, h.complete
    if read is not None:

        async def on_read(request: Any) -> Any:
            return types_v1.ServerResult(await read(str(request.params.uri)))

        handlers[types_v1.ReadResourceRequest] = on_read
    for request_type, handler in (
        (types_v1.SubscribeRequest, h.subscribe_resource),
        (types_v1.UnsubscribeRequest, h.unsubscribe_resource),
    ):
        if handler is not None:
            handlers[request_type] = _v1_subscriber(server, handler)
    if get is not None:

        async def on_get(request: Any) -> Any:
            return types_v1.ServerResult(await get(request.params.name, request.params.arguments))

        handlers[types_v1.GetPromptRequest] = on_get
    if complete is not None:

        async def on_complete(request: Any) -> Any:
            params = request.params.model_dump(by_alias=True, mode="json", exclude_none=True)
            return types_v1.ServerResult(await complete(params))

        handlers[types_v1.CompleteRequest] = on_complete


def _v1_subscriber(  # pragma: no cover - 1.x only
    server: Any, handler: Callable[[str, Any], Awaitable[None]]
) -> Any:
    async def on_subscription(request: Any) -> Any:
        await handler(str(request.params.uri), server.request_context.session)
        return types_v1.ServerResult(types_v1.EmptyResult())

    return on_subscription
