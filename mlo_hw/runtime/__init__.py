"""The host runtime: one API to run a build folder's engine on the golden model, the RTL simulation, a
LiteX SoC (Etherbone or UART bridge) or a Zynq board (PYNQ). See ``docs/runtime.md``.

    from mlo_hw.runtime import Accelerator
    with Accelerator("build/bert_tiny", backend="sim") as acc:
        acc.load_weights()
        y = acc.run(x, tokens)
        print(acc.profile())
"""

from .accelerator import (BACKENDS, Accelerator, DeviceError, DeviceTimeout, Profile, ProfileRow,  # noqa: F401
                          RuntimeInputError, make_backend)
from .backend import Backend, BackendUnavailable  # noqa: F401
from .build import BadBuild, BuildFolder, RegisterMap, write_runtime_json  # noqa: F401

__all__ = ["Accelerator", "DeviceError", "DeviceTimeout", "RuntimeInputError", "Profile", "ProfileRow", "BACKENDS",
           "make_backend", "Backend", "BackendUnavailable", "BadBuild", "BuildFolder", "RegisterMap",
           "write_runtime_json"]
