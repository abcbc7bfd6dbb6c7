"""Pins whose wheels are already in a wheelhouse's cache: tiny files (``content`` with the name
filled in), each pinned by its own sha256, for tests of how a closure's folder is assembled."""

from __future__ import annotations

import hashlib

from edgevllm.sources.wheelhouse import Wheelhouse
from edgevllm.sources.wheels import WheelPin


def cached_pins(house: Wheelhouse, names: tuple[str, ...], content: str = "{name} wheel",
                version: str = "1.0") -> list[WheelPin]:
    pins = []
    for name in names:
        data = content.format(name=name).encode()
        pin = WheelPin(name, version, f"{name}-{version}-py3-none-any.whl",
                       hashlib.sha256(data).hexdigest())
        house.path_for(pin).parent.mkdir(parents=True)
        house.path_for(pin).write_bytes(data)
        pins.append(pin)
    return pins
