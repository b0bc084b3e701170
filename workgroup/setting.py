"""How a setting of the daemon is declared: one dataclass field, made by :func:`setting`.

The field's name is its TOML key; ``WORKGROUP_<NAME>`` is its environment
variable and ``--<name>`` (underscores as dashes) its ``workgroup run`` flag;
its annotation gives its type and its default is the value when no source sets
it.  :mod:`workgroup.runtime.config` reads every source, the flags of
``workgroup run`` and the settings table of docs/runtime.md from these fields.

Rules:

* the type is ``int``, ``str`` or ``bool``, or one of them ``| None`` (``None``:
  the default, which ``default_text`` then describes);
* a field that holds a dataclass of settings (``Settings.security``) embeds its
  fields under their own setting names: nothing is declared twice;
* secrets get no flag (``flag=False``), so that they do not show in process
  listings.
"""

from __future__ import annotations

from dataclasses import Field, dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

#: The key of a setting's :class:`SettingDoc` in its field's metadata.
METADATA_KEY = "workgroup.setting"


@dataclass(frozen=True, slots=True)
class SettingDoc:
    """What a setting's field says besides its name, type and default."""

    #: One or two sentences: the flag's help and the docs table's description.
    help: str
    #: How the default reads (``None``: the default value itself).
    default_text: str | None = None
    #: Whether ``workgroup run`` has a flag for it.
    flag: bool = True
    #: The values it takes, for the flag (checked where the setting is validated).
    choices: tuple[str, ...] = ()
    #: The flag takes a file path.
    path: bool = False
    #: Its name in every source, when the field's own is not (``Security.protocol``
    #: is ``security_protocol``).
    name: str | None = None


def setting(
    default: T,
    help: str,
    *,
    default_text: str | None = None,
    flag: bool = True,
    choices: tuple[str, ...] = (),
    path: bool = False,
    name: str | None = None,
    repr: bool = True,
) -> T:
    """A dataclass field that declares a setting (see the module docstring)."""
    doc = SettingDoc(help, default_text, flag, choices, path, name)
    return field(default=default, repr=repr, metadata={METADATA_KEY: doc})


def setting_doc(declared: Field[Any]) -> SettingDoc | None:
    """The :class:`SettingDoc` of a field made by :func:`setting`, else ``None``."""
    doc = declared.metadata.get(METADATA_KEY)
    return doc if isinstance(doc, SettingDoc) else None


__all__ = ["METADATA_KEY", "SettingDoc", "setting", "setting_doc"]
