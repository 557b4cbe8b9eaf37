"""A request's sampling parameters, validated where the request enters (imports no torch).

A bad value is a ValueError naming the field, which the front end turns into an HTTP 400. Types are
checked before anything is converted, so `stop: 5` or `max_new_tokens: true` is refused by name
rather than failing (or passing) deep inside a conversion.

At most one output constraint (json_schema, regex or ebnf, as upstream's sampling params name them)
per request; the scheduler compiles it with the resolved --grammar-backend.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

MAX_NEW_TOKENS_DEFAULT = 128


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = MAX_NEW_TOKENS_DEFAULT
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    logit_bias: dict[str, float] | None = None   # token id (as a string, as in JSON) -> bias
    json_schema: str | None = None   # a JSON schema (as JSON text) the output must match
    regex: str | None = None         # a regular expression the whole output must match
    ebnf: str | None = None          # an EBNF (GBNF) grammar the output must match

    @property
    def constraint(self) -> tuple[str, str] | None:
        """(kind, text) of the output constraint, or None."""
        for kind in CONSTRAINTS:
            if getattr(self, kind) is not None:
                return kind, getattr(self, kind)
        return None

    @property
    def penalized(self) -> bool:
        """Does anything change the logits before sampling?"""
        return bool(self.frequency_penalty or self.presence_penalty or self.repetition_penalty != 1.0
                    or self.min_new_tokens or self.logit_bias)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @classmethod
    def from_request(cls, raw: Mapping[str, Any]) -> "SamplingParams":
        """Validate a request's sampling fields; ValueError names the bad field (-> HTTP 400)."""
        unknown = sorted(set(raw) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown sampling parameter(s) {unknown}; known: "
                             f"{sorted(f.name for f in dataclasses.fields(cls))}")
        values = {k: v for k, v in raw.items() if v is not None}
        stop = values.get("stop", ())
        if not (isinstance(stop, str) or (isinstance(stop, (list, tuple)) and all(isinstance(s, str) for s in stop))):
            raise ValueError(f"stop must be a string or a list of strings, got {_shown(stop)}")
        values["stop"] = (stop,) if isinstance(stop, str) else tuple(stop)
        stop_ids = values.get("stop_token_ids", ())
        if not isinstance(stop_ids, (list, tuple)) or not all(_is_int(t) for t in stop_ids):
            raise ValueError(f"stop_token_ids must be a list of integer token ids, got {_shown(stop_ids)}")
        values["stop_token_ids"] = tuple(stop_ids)
        if "logit_bias" in values:
            if not isinstance(values["logit_bias"], dict):
                raise ValueError(f"logit_bias must map token ids to numbers, got {_shown(values['logit_bias'])}")
            values["logit_bias"] = {str(k): v for k, v in values["logit_bias"].items()} or None
        for kind in CONSTRAINTS:
            if kind in values and not (isinstance(values[kind], str) and values[kind]):
                raise ValueError(f"{kind} must be a non-empty string, got {_shown(values[kind])}")
        given = [kind for kind in CONSTRAINTS if kind in values]
        if len(given) > 1:
            raise ValueError(f"only one of json_schema, regex and ebnf may be set; got {' and '.join(given)}")
        params = cls(**values)
        checks = [
            (_is_int(params.max_new_tokens) and params.max_new_tokens >= 1,
             "max_new_tokens must be an integer >= 1"),
            (_is_number(params.temperature) and params.temperature >= 0, "temperature must be >= 0"),
            (_is_number(params.top_p) and 0 < params.top_p <= 1, "top_p must be in (0, 1]"),
            (_is_int(params.top_k) and (params.top_k == -1 or params.top_k >= 1),
             "top_k must be -1 (off) or >= 1"),
            (all(isinstance(s, str) and s for s in params.stop), "stop must be a non-empty string or a list of them"),
            (all(isinstance(t, int) for t in params.stop_token_ids), "stop_token_ids must be integers"),
            (isinstance(params.ignore_eos, bool), "ignore_eos must be true or false"),
            (params.seed is None or _is_int(params.seed), "seed must be an integer"),
            # Ranges as upstream SGLang checks them.
            (_is_number(params.frequency_penalty) and -2 <= params.frequency_penalty <= 2,
             "frequency_penalty must be in [-2, 2]"),
            (_is_number(params.presence_penalty) and -2 <= params.presence_penalty <= 2,
             "presence_penalty must be in [-2, 2]"),
            (_is_number(params.repetition_penalty) and 0 < params.repetition_penalty <= 2,
             "repetition_penalty must be in (0, 2] (1.0 = no penalty)"),
            (_is_int(params.min_new_tokens) and 0 <= params.min_new_tokens <= params.max_new_tokens,
             "min_new_tokens must be an integer in [0, max_new_tokens]"),
            (params.logit_bias is None or (isinstance(params.logit_bias, dict) and all(
                k.isdigit() and _is_number(v) and -100 <= v <= 100
                for k, v in params.logit_bias.items())),
             "logit_bias must map token ids to numbers in [-100, 100]"),
        ]
        for ok, message in checks:
            if not ok:
                field = message.split(" ", 1)[0]
                raise ValueError(f"{message}, got {_shown(getattr(params, field))}")
        return params

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["stop"], d["stop_token_ids"] = list(self.stop), list(self.stop_token_ids)
        return d


CONSTRAINTS = ("json_schema", "regex", "ebnf")


def _shown(value: Any) -> str:
    """A bad value as the error shows it: JSON spelling, cut short."""
    text = json.dumps(value) if isinstance(value, (bool, int, float, str, list, dict, type(None))) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
