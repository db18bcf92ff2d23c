"""mlo_hw: generate synthesizable RTL that runs a transformer encoder stack by multilayer offload."""

__version__ = "0.1.0"
