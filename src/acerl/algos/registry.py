"""A small name -> object registry, so trainers select algorithms by config, never by branching on names.

Example::

    ESTIMATORS: Registry[AdvantageFn] = Registry("advantage estimator")

    @ESTIMATORS.register("grpo")
    def grpo(...): ...

    fn = ESTIMATORS.get(cfg["estimator"])  # unknown name -> ValueError listing the valid ones
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Registry"]


class Registry(Generic[T]):
    """Maps names to objects of one kind (e.g. advantage estimators sharing one signature).

    Args:
        kind: what the registry holds, used in error messages ("advantage estimator", "policy loss").
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator adding ``obj`` under ``name``; a name already taken raises ``ValueError``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def decorator(obj: T) -> T:
            if name in self._items:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered (to {self._items[name]!r}); "
                    "pick another name"
                )
            self._items[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> T:
        """The object registered as ``name``; an unknown name raises ``ValueError`` listing the valid ones."""
        try:
            return self._items[name]
        except KeyError:
            raise ValueError(
                f"unknown {self.kind} {name!r}; valid names: {', '.join(self.names()) or '(none registered)'}"
            ) from None

    def names(self) -> tuple[str, ...]:
        """Registered names, sorted."""
        return tuple(sorted(self._items))

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={list(self.names())})"
