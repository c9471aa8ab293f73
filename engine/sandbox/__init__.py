"""The snippet sandbox: an episode folder, and model-written Python run in it under bubblewrap
(or, by explicit opt-in, under an audit hook alone). It knows nothing of any benchmark; the
agentic analyst is its user. ``docs/design/sandbox.md`` is the threat model."""

from engine.sandbox.folder import (
    HOW_TO_FIX,
    ISOLATIONS,
    UIDS,
    VIEWS,
    Limits,
    PathRefused,
    RunResult,
    Sandbox,
    SandboxUnavailable,
    bwrap_binary,
    bwrap_status,
    clip_list,
    isolation_problems,
    kill_uid,
    lease_uid,
    require_isolation,
)

__all__ = [
    "HOW_TO_FIX", "ISOLATIONS", "UIDS", "VIEWS", "Limits", "PathRefused", "RunResult", "Sandbox", "SandboxUnavailable",
    "bwrap_binary", "bwrap_status", "clip_list", "isolation_problems", "kill_uid", "lease_uid", "require_isolation",
]
