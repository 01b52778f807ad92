"""When `KubeClient` sends a request again: an answer that carries a Retry-After, as client-go's REST client does.

client-go (rest/with_retry.go, rest/request.go, v0.34.4) retries a request whose answer is 429 Too Many Requests, or
any 5xx, *and* carries a `Retry-After` header of whole seconds, after waiting that long, up to `maxRetries` times
(10 by default, the kubelet's clients included). Every verb is retried: the apiserver answers 429 from its priority
and fairness filter (or the max-in-flight one) and 5xx with a Retry-After while shutting down, before the request
reaches a handler, so nothing was done and a POST or a PATCH can go again (client-go keeps the body as bytes and
sends them again; it refuses only an opaque reader, which this client never has). A watch's opening request is
retried the same way; a watch already streaming is not.

What it does not retry: a 429 or 5xx without the header, or with a header that is not an integer (an HTTP date, a
fraction), so a Status whose `details.retryAfterSeconds` came without the header is final here too (the apiserver
sends both together). When the retries are used up, the caller gets the last answer's error (TooManyRequests for a
429) and its own policy decides what next, as with client-go.

The delay is not capped by client-go itself; the request's timeout caps it. client-go's `Request.request` puts the
client's `Timeout` on the context of the whole request, retries included, and the wait ends with the context (the
kubelet's heartbeat client, which renews the Lease, has min(nodeStatusUpdateFrequency, nodeLeaseDuration): 10 s).
Here the request's timeout is that deadline: a retry's wait ends at the deadline at the latest, and a wait that
reaches it gives up there with the last answer's error, instead of sending once more with no time left (client-go's
next attempt then fails at once on the expired context).
"""

from __future__ import annotations

import re
from typing import Final

# client-go's Request.maxRetries default ("about ten retry attempts if we get a Retry-After response").
MAX_RETRIES: Final = 10

_SECONDS = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.Atoi takes


def retry_after_seconds(status: int, retry_after: str | None) -> int | None:
    """client-go's checkWait: the seconds to wait before sending again, or None when this answer is final.

    Only a 429 or a 5xx with an integer Retry-After header is retried; a negative value waits nothing (client-go's
    sleep of a negative duration returns at once)."""
    if status != 429 and status < 500:
        return None
    if retry_after is None or not _SECONDS.fullmatch(retry_after.strip()):
        return None
    return max(0, int(retry_after.strip()))


class Retries:
    """One request's retries (client-go's withRetry): how many are left, and the deadline its waits must end by."""

    def __init__(self, *, max_retries: int = MAX_RETRIES, deadline: float | None = None) -> None:
        self.max_retries = max(0, max_retries)
        self.deadline = deadline
        self.attempts = 0  # answers seen that were not the last

    def next_wait(self, status: int, retry_after: str | None, now: float) -> float | None:
        """After a failed answer: how long to wait before sending again, or None to give up with its error.

        A wait that would pass the deadline is cut to it; `expired` then says the request must give up after it."""
        self.attempts += 1
        if self.attempts > self.max_retries:
            return None
        seconds = retry_after_seconds(status, retry_after)
        if seconds is None:
            return None
        if self.deadline is not None:
            return max(0.0, min(float(seconds), self.deadline - now))
        return float(seconds)

    def expired(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def remaining(self, now: float, timeout: float) -> float:
        """The next attempt's own timeout: the first has `timeout`, a retry what is left of it before the deadline."""
        if self.deadline is None or self.attempts == 0:
            return timeout
        return max(0.001, min(timeout, self.deadline - now))


__all__ = ["MAX_RETRIES", "Retries", "retry_after_seconds"]
