"""The method registry: name -> Method. Adding a method is one module and one line here."""
from __future__ import annotations

from poxm_core.config.schema import MethodConfig
from poxm_core.common.errors import PoxmInputError, nearest
from poxm_core.common.registration import add
from poxm_core.methods.banditnet import BanditNet
from poxm_core.methods.base import Method
from poxm_core.methods.dm import REWARD_METHOD, DirectMethod
from poxm_core.methods.dr_poxm import DRPOXM
from poxm_core.methods.head import HeadSpec
from poxm_core.methods.logging_policy import Logging
from poxm_core.methods.pm_banditnet import PMBanditNet
from poxm_core.methods.potec import POTEC
from poxm_core.methods.poxm import POXM
from poxm_core.methods.skyline import Skyline, SkylineEndToEnd
from poxm_core.methods.supervised_logs import SupervisedLogs
from poxm_core.methods.wpoxm import WPOXM

__all__ = ["METHODS", "REWARD_METHOD", "get_method", "head_grid", "register_method"]

METHODS: dict[str, Method] = {m.name: m for m in (Logging(), DirectMethod(), BanditNet(), PMBanditNet(),
                                                  POXM(), WPOXM(), DRPOXM(), SupervisedLogs(), POTEC(),
                                                  Skyline(), SkylineEndToEnd())}


def register_method(method: Method) -> Method:
    """Add a Method instance to METHODS under `method.name` (from a plugin: config key `plugins`).
    Registering the same class again under its name is a no-op (a plugin imported twice)."""
    if not isinstance(method, Method) or not method.name:
        raise TypeError(f"method: expected a Method instance with a name, got {method!r}")
    return add(METHODS, "method", method.name, method, same=lambda old, new: type(old) is type(new))


def get_method(name: str) -> Method:
    """The registered method `name`; an unknown name is a PoxmInputError naming the nearest one."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise PoxmInputError(f"methods.{name}: unknown method '{name}'" + nearest(str(name), METHODS)) from None


def head_grid(name: str, mc: MethodConfig | None = None):
    """HeadSpec for every (p, lam) grid point of method `name` under its config."""
    m = get_method(name)
    return [HeadSpec(name, p, lam) for p, lam in m.grid(mc if mc is not None else m.Options())]
