"""Asking Prometheus, behind one small protocol so the analysis does not care who answers.

Blocking (prometheus-api-client uses requests); the caller runs it off the event loop. Every query
has a timeout; any failure to get a well-formed answer raises ProviderError, never a number.
"""

import math
import re
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.exceptions import RequestException
from urllib3.util.retry import Retry

RETRY = Retry(total=1, connect=1, read=0, status=1, backoff_factor=0, status_forcelist=(502, 503, 504))
"""One immediate retry for a refused connection or a proxy's blip; never for a read that timed out, so one
analysis waits at most about one timeout for a hung Prometheus (the next analysis asks again)."""


class ProviderError(RuntimeError):
    """Prometheus was unreachable or gave an answer that is not a query result."""


SHOWN_ANSWER = 240
"""Characters of a failure kept in an error: enough for Prometheus' own error line or a connection error's
cause, not a page of a body that whoever serves the URL chose (which reaches status, Events and logs)."""
_QUERY_URL = re.compile(r" with url: \S+")
"""requests names the whole query URL in its errors: the PromQL, not the reason."""


def shown_url(url: str) -> str:
    """`url` as errors name it: without userinfo, query or fragment, where credentials may be."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def _short(error: BaseException, secrets: tuple[str, ...]) -> str:
    """One line of at most SHOWN_ANSWER characters, with every secret the request carried blanked out."""
    text = _QUERY_URL.sub("", " ".join(str(error).split()))
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text if len(text) <= SHOWN_ANSWER else text[: SHOWN_ANSWER - 1] + "…"


class MetricsProvider(Protocol):
    """Instant queries evaluated `at` one Unix time, so the queries of one analysis see the same samples
    (evaluated a moment apart, short ranges can straddle a scrape and disagree)."""

    def scalar(self, query: str, at: float | None = None) -> float | None:
        """The single value of an instant query; None when the result is empty or NaN."""

    def by_label(self, query: str, label: str, at: float | None = None) -> dict[str, float]:
        """An instant vector as label value -> value (NaN samples left out)."""


class SeriesProvider(MetricsProvider, Protocol):
    """A MetricsProvider that also answers an instant vector whole: one request for many fields (the watch)."""

    def series(self, query: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        """Every series of an instant vector: its labels and its value (NaN samples left out)."""


class Prometheus:
    """A MetricsProvider over the Prometheus HTTP API."""

    def __init__(self, url: str, token: str | None = None, timeout_seconds: float = 10.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._client = PrometheusConnect(
            url=url, headers=headers, disable_ssl=False, retry=RETRY, timeout=timeout_seconds
        )
        self._url = shown_url(url)
        parts = urlsplit(url)
        query = tuple(value for _, value in parse_qsl(parts.query))
        self._secrets = tuple(s for s in (token, parts.password, parts.username, *query) if s)

    def _query(self, query: str, at: float | None) -> list[object]:
        try:
            result = self._client.custom_query(query, params=None if at is None else {"time": f"{at:.3f}"})
        except (PrometheusApiClientException, RequestException, ValueError) as error:
            raise ProviderError(f"Prometheus at {self._url}: {_short(error, self._secrets)}") from None
        except (KeyError, TypeError) as error:  # JSON, but not a query answer (no `data.result`)
            raise ProviderError(f"Prometheus at {self._url} answered JSON that is not a query result") from error
        if not isinstance(result, list):
            raise ProviderError(f"Prometheus at {self._url} answered {type(result).__name__}, not a vector")
        return result

    def scalar(self, query: str, at: float | None = None) -> float | None:
        samples = self._query(query, at)
        if len(samples) > 1:
            raise ProviderError(f"expected one series, got {len(samples)} for {query}")
        if not samples:
            return None
        _, value = self._sample(samples[0], query)
        return None if math.isnan(value) else value

    def by_label(self, query: str, label: str, at: float | None = None) -> dict[str, float]:
        values = {}
        for sample in self._query(query, at):
            metric, value = self._sample(sample, query)
            if not math.isnan(value):
                values[str(metric.get(label, ""))] = value
        return values

    def series(self, query: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        found = []
        for sample in self._query(query, at):
            metric, value = self._sample(sample, query)
            if not math.isnan(value):
                found.append(({str(k): str(v) for k, v in metric.items()}, value))
        return found

    def _sample(self, sample: object, query: str) -> tuple[dict[str, Any], float]:
        """One series of an instant vector: its labels and its value (NaN kept: it means "no data").

        Anything else (another result type, a value that is not a number, an infinite count) is a
        malformed answer: an error, never a number the judge would take at face value.
        """
        try:
            if not isinstance(sample, dict):
                raise TypeError(type(sample).__name__)
            metric, (_, text) = sample.get("metric") or {}, sample["value"]
            value = float(text)
        except (KeyError, TypeError, ValueError) as error:
            raise ProviderError(f"Prometheus at {self._url}: not an instant vector sample for {query}") from error
        if math.isinf(value) or not isinstance(metric, dict):
            raise ProviderError(f"Prometheus at {self._url}: sample {text!r} for {query} is not a finite number")
        return metric, value
