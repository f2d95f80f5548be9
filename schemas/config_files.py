"""Reading a JSON configuration file (ontology, SLOs) into its pydantic model, with errors a person can act on.

A bad file is refused with one line that names the file and every failing field with its message
(``ontology.json is not a valid ontology: entity_types: Field required``), never pydantic's
multi-line report or a JSON error that does not say which file it came from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)

MAX_LISTED_ERRORS = 10
"""Fields named in one message; the rest are counted, so a badly wrong file still gives one readable line."""


class ConfigFileError(ValueError):
    """A configuration file that cannot be read, is not JSON, or does not fit its model."""


def validation_summary(error: ValidationError) -> str:
    """``field.path: message; ...`` for every error pydantic found (one line)."""
    parts = []
    for item in error.errors(include_url=False):
        location = ".".join(str(part) for part in item.get("loc", ()))
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{location}: {message}" if location else message)
    if len(parts) > MAX_LISTED_ERRORS:
        parts = [*parts[:MAX_LISTED_ERRORS], f"and {len(parts) - MAX_LISTED_ERRORS} more"]
    return "; ".join(parts) or "invalid"


def load_model(path: Path | str, model: type[Model], what: str) -> Model:
    """The file at ``path`` as ``model``; ``ConfigFileError`` naming the file and ``what`` it should be."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigFileError(f"{path}: cannot read the {what}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path} is not a valid {what}: not UTF-8 text") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigFileError(f"{path} is not a valid {what}: not JSON ({error})") from None
    try:
        return model.model_validate(document)
    except ValidationError as error:
        raise ConfigFileError(f"{path} is not a valid {what}: {validation_summary(error)}") from None
