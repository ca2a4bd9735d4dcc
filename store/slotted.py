"""Value classes of the store API as plain classes with `__slots__`, not dataclasses:
importing `dataclasses` pulls in inspect, ast and tokenize, a tenth of what a `mqfs dump`
selection spends before its first record. Each class names its fields once, in
`__match_args__` (their order in its constructor, which takes them positionally or by name),
and gets here what its users saw of the dataclass: equality, repr, pickling and `replace`."""

from __future__ import annotations

TYPE_CHECKING = False  # mypy alone reads these: importing typing is ~6% of a tag selection
if TYPE_CHECKING:
    from typing import Any


class Slotted:
    """Equal when of the same class with equal fields; unhashable (mutable), as an `eq`
    dataclass is."""

    __slots__ = ()
    __match_args__: tuple[str, ...] = ()

    def _values(self) -> tuple[Any, ...]:
        return tuple([getattr(self, name) for name in self.__match_args__])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{self.__class__.__qualname__}({fields})"

    def __reduce__(self) -> tuple[Any, ...]:
        # built again through the constructor: a frozen class has no setattr to restore by
        return self.__class__, self._values(), getattr(self, "__dict__", None) or None

    def replace(self, **changes: Any) -> Any:
        """A copy with `changes` (dataclasses.replace): TypeError for a name no field has."""
        return self.__class__(**{**dict(zip(self.__match_args__, self._values())), **changes})


class FrozenError(AttributeError):
    """An assignment to a field of a frozen value (dataclasses' FrozenInstanceError)."""


class Frozen(Slotted):
    """Fields set once, by the constructor (through `_set`); hashable by its fields."""

    __slots__ = ()

    def _set(self, **fields: Any) -> None:
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self._values())
