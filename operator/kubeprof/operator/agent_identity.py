"""Who sent a request: an agent pod's ServiceAccount token, checked with TokenReview.

Agent pods carry a projected ServiceAccount token bound to their pod, with the audience
`AUDIENCE` and a short life (the kubelet rewrites the file before it expires; the agent
reads it at each request). The ingest hands it to the API server's TokenReview, which
says whether it is valid for our audience and, for a pod-bound token, which pod and node
it was issued to (`authentication.kubernetes.io/pod-name`, `/pod-uid`, `/node-name`). The
pod is then looked up once: it must be an agent pod of the very session the request names
(its labels and its DaemonSet owner), run under the agents' ServiceAccount, and the node
the token names is the only node its batches may speak for.

Answers are cached by the token's SHA-256 for a bounded time (never past the token's own
expiry) and size, refusals for a shorter time, so a busy agent costs one review a minute
and a flood of bad tokens cannot turn every request into an API call.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubeprof.operator.config import LABEL_COMPONENT, LABEL_SESSION, LABEL_SHARD

AUDIENCE = "kubeprof.dev/ingest"  # the projected token's audience; no other is accepted
EXTRA = "authentication.kubernetes.io/"  # TokenReview's extra keys of a pod-bound token
SA_PREFIX = "system:serviceaccount:"


class Denied(Exception):
    """Credentials refused: 401 (not a valid token for us) or 403 (valid, not allowed);
    the message says why and is safe to send back (it holds no token)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    """An agent pod, as its reviewed token and the pod object say."""

    namespace: str
    service_account: str
    pod: str
    pod_uid: str
    node: str
    labels: Mapping[str, str]  # the pod's labels (which session, which shard)
    owner: str  # "<kind>/<name>" of the pod's controller ("" when it has none)

    def describe(self) -> str:
        return f"pod {self.namespace}/{self.pod} on node {self.node or '?'}"


def looks_like_jwt(token: str) -> bool:
    """ServiceAccount tokens are JWTs (three base64url parts); session tokens are not."""
    return token.startswith("eyJ") and token.count(".") == 2


def expiry(token: str) -> float | None:
    """The token's `exp` (Unix s), read without checking the signature: used only to
    stop caching a TokenReview answer past it (the review itself checked the token)."""
    try:
        part = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        return float(claims["exp"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def from_review(status: Mapping[str, Any], audience: str = AUDIENCE) -> tuple[str, str, str, str]:
    """(namespace, service account, pod, node) a TokenReview status names.

    Raises Denied(401) when the API server did not authenticate the token for `audience`
    (expired, revoked, another audience, forged), Denied(403) when it is valid but not a
    pod-bound ServiceAccount token."""
    if not status.get("authenticated"):
        why = str(status.get("error") or "not authenticated")[:200]
        raise Denied(401, "token_invalid", f"the API server refused the token: {why}")
    if audience not in (status.get("audiences") or []):
        raise Denied(401, "token_audience", f"the token is not for audience {audience}")
    user = status.get("user") or {}
    name = str(user.get("username", ""))
    if not name.startswith(SA_PREFIX) or name.count(":") != 3:
        raise Denied(403, "not_agent", f"{name[:120]!r} is not a ServiceAccount")
    ns, sa = name.removeprefix(SA_PREFIX).split(":")
    extra = user.get("extra") or {}
    pod = next(iter(extra.get(EXTRA + "pod-name") or []), "")
    node = next(iter(extra.get(EXTRA + "node-name") or []), "")
    if not pod:
        raise Denied(
            403,
            "not_agent",
            f"token of ServiceAccount {ns}/{sa} is not bound to a pod (agents send their "
            "pod's projected token)",
        )
    return ns, sa, str(pod), str(node)


def identify(
    status: Mapping[str, Any], pod: Mapping[str, Any] | None, audience: str = AUDIENCE
) -> AgentIdentity:
    """The identity a TokenReview status and the pod it names (None: gone) establish."""
    ns, sa, name, node = from_review(status, audience)
    if pod is None:
        raise Denied(403, "not_agent", f"pod {ns}/{name} the token is bound to does not exist")
    meta = pod.get("metadata") or {}
    extra = ((status.get("user") or {}).get("extra")) or {}
    uid = next(iter(extra.get(EXTRA + "pod-uid") or []), "")
    if uid and meta.get("uid") != uid:
        raise Denied(403, "not_agent", f"pod {ns}/{name} was replaced since the token was made")
    node = node or str((pod.get("spec") or {}).get("nodeName") or "")
    owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
    return AgentIdentity(
        ns,
        sa,
        name,
        str(meta.get("uid", "")),
        node,
        dict(meta.get("labels") or {}),
        f"{owner.get('kind')}/{owner.get('name')}" if owner else "",
    )


def check_agent(
    who: AgentIdentity,
    namespace: str,
    session_label: str,
    daemonsets: Callable[[int], str],
    service_account: str,
) -> None:
    """Raise Denied(403) unless `who` is an agent pod of the session: in its namespace,
    under the agents' ServiceAccount, labelled as its agent and owned by its DaemonSet
    (`daemonsets(shard)` names shard `shard`)."""
    if who.namespace != namespace:
        raise Denied(
            403,
            "not_agent",
            f"{who.describe()} is not in namespace {namespace}, where this session's agents run",
        )
    if who.service_account != service_account:
        raise Denied(
            403,
            "not_agent",
            f"token of ServiceAccount {who.namespace}/{who.service_account}; this "
            f"session's agents run as {namespace}/{service_account}",
        )
    shard = who.labels.get(LABEL_SHARD, "0")
    if (
        who.labels.get(LABEL_SESSION) != session_label
        or who.labels.get(LABEL_COMPONENT) != "agent"
        or not shard.isdigit()
        or who.owner != f"DaemonSet/{daemonsets(int(shard))}"
    ):
        raise Denied(403, "not_agent", f"{who.describe()} is not an agent pod of this session")


@dataclass(frozen=True, slots=True)
class _Cached:
    identity: AgentIdentity | None
    denied: Denied | None
    until: float  # time.time() after which it is asked again


class TokenReviews:
    """TokenReview + pod lookup with a bounded, time-limited cache (thread-safe)."""

    def __init__(
        self,
        review: Callable[[str, str], Mapping[str, Any]],
        get_pod: Callable[[str, str], Mapping[str, Any] | None],
        *,
        audience: str = AUDIENCE,
        ttl_s: float = 60.0,
        denied_ttl_s: float = 10.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._review, self._get_pod = review, get_pod
        self.audience, self.ttl_s, self.denied_ttl_s = audience, ttl_s, denied_ttl_s
        self.max_entries, self.clock = max_entries, clock
        self._lock = threading.Lock()
        self._cache: OrderedDict[bytes, _Cached] = OrderedDict()
        self.reviews = 0  # TokenReviews sent (what the cache saves is visible in tests)

    def __len__(self) -> int:
        return len(self._cache)

    @staticmethod
    def _key(token: str, namespace: str) -> bytes:
        return hashlib.sha256(f"{namespace}\0{token}".encode("utf-8", "surrogateescape")).digest()

    def cached(self, token: str, namespace: str) -> AgentIdentity | None:
        """The cached identity of `token` presented for a session in `namespace`, raising
        its cached refusal; None when not cached (ask `identity`, which calls the API
        server: not in the event loop)."""
        key = self._key(token, namespace)
        with self._lock:
            hit = self._cache.get(key)
            if hit is None or hit.until <= self.clock():
                return None
            self._cache.move_to_end(key)
        if hit.denied is not None:
            raise hit.denied
        return hit.identity

    def identity(self, token: str, namespace: str) -> AgentIdentity:
        """Review `token` presented for a session in `namespace` (blocking: API calls),
        cache the answer, return or raise it. A token of another namespace is refused
        before any pod lookup (the operator may not even list pods there)."""
        key = self._key(token, namespace)
        now = self.clock()
        exp = expiry(token)
        try:
            self.reviews += 1
            status = self._review(token, self.audience)
            ns, sa, pod, _node = from_review(status, self.audience)
            if ns != namespace:
                raise Denied(
                    403,
                    "not_agent",
                    f"token of ServiceAccount {ns}/{sa} (pod {pod}) is not from namespace "
                    f"{namespace}, where this session's agents run",
                )
            who = identify(status, self._get_pod(ns, pod), self.audience)
            until = min(now + self.ttl_s, exp if exp is not None else now + self.ttl_s)
            self._put(key, _Cached(who, None, until))
            return who
        except Denied as exc:
            self._put(key, _Cached(None, exc, now + self.denied_ttl_s))
            raise

    def _put(self, key: bytes, value: _Cached) -> None:
        with self._lock:
            self._cache[key] = value
            self._cache.move_to_end(key)
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
