"""One error type for bad input, formatted as 'file: key: what is wrong and what is allowed'."""
from __future__ import annotations


class SpecError(ValueError):
    """Bad input. `lines` holds one message per problem; str() joins them."""

    def __init__(self, lines: list[str] | str):
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))

    @classmethod
    def at(cls, source: str, key: str, message: str) -> "SpecError":
        return cls(f"{source}: {key or '(top level)'}: {message}")
