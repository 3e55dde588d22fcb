"""Config for every phase: defaults in the script, then <phase>/config.yaml, then --set key=value.

Keys are nested; --set takes dotted keys (--set runner.loops=100) and YAML values
(--set batch_sizes=[1,2]). A key that the defaults do not have is an error, wherever it
comes from. Every value is checked against its default's type and range as it is merged
(check_value: a number for a number, >= 0 where the default is, finite; true/false for a bool; a
list or mapping for one), so a bad value is one line naming the key, the value and what is expected.
The resolved config is saved beside the phase's outputs.
"""
import argparse
import copy
import json
import math
from pathlib import Path

import yaml

from hase.utils import paths
from hase.utils.errors import HaseError


def base_parser(description: str, phase_dir: str, config_name: str = "config.yaml") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--config", type=Path, default=paths.phase_config(phase_dir).with_name(config_name),
                   help=f"YAML config (default: {phase_dir}/{config_name})")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key (dotted, YAML value); repeatable")
    p.add_argument("--device", choices=["cpu", "cuda", "auto"], default=None,
                   help="ORT target: cpu, cuda (error if CUDA cannot run) or auto")
    p.add_argument("--log-level", default="INFO")
    return p


# mappings whose keys are data, not settings: a new value replaces them whole
FREE_MAPS = {"queries", "pin_dims", "gpus", "machines"}   # machines: calibration_age.py, folder -> its exam


def _expected(default) -> str:
    if isinstance(default, bool):
        return "true or false"
    if isinstance(default, (int, float)):
        return "a number >= 0" if default >= 0 else "a number"
    if isinstance(default, str):
        return "a string"
    if isinstance(default, list):
        kinds = {_kind(x) for x in default}
        return f"a list of {kinds.pop()}s" if len(kinds) == 1 and default else "a list"
    return "a mapping"


def _kind(x) -> str:
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, (int, float)):
        return "number"
    return "string" if isinstance(x, str) else "other"


def _number_ok(v, non_negative: bool) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and (v >= 0 or not non_negative))


def check_value(key: str, default, value, source: str):
    """`value` for the config key whose default is `default`, if it has the default's type and range (a number
    where the default is one, >= 0 where the default is, finite; a list whose items are numbers / strings where
    the default's all are); else HaseError naming the key, the value and what is expected. A number given for
    a string key becomes the string (--set out=2024). A default of None takes anything."""
    if default is None:
        return value
    ok = True
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, (int, float)):
        ok = _number_ok(value, default >= 0)
    elif isinstance(default, str):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        ok = isinstance(value, str)
    elif isinstance(default, list):
        kinds = {_kind(x) for x in default}
        ok = isinstance(value, list)
        if ok and kinds == {"number"}:
            ok = all(_number_ok(x, min(default) >= 0) for x in value)
        elif ok and kinds == {"string"}:
            ok = all(isinstance(x, str) for x in value)
    elif isinstance(default, dict):
        ok = isinstance(value, dict)
    if not ok:
        shown = json.dumps(value, default=str) if not isinstance(value, float) else f"{value:g}"
        raise HaseError(f"config key '{key}' = {shown[:80]} is not valid (expected {_expected(default)}, "
                        f"like the default {json.dumps(default, default=str)[:40]})", source)
    return value


def _merge(base: dict, upd: dict, source: str, prefix: str = "") -> dict:
    for k, v in upd.items():
        key = f"{prefix}{k}"
        if k in FREE_MAPS and k in base:
            if not isinstance(v, dict):
                raise HaseError(f"config key '{key}' must be a mapping", source)
            base[k] = v
            continue
        if k not in base:
            raise HaseError(f"unknown config key '{key}'", source)
        if isinstance(base[k], dict) and base[k] and not isinstance(v, dict):
            raise HaseError(f"config key '{key}' must be a mapping", source)
        if isinstance(base[k], dict) and base[k] and isinstance(v, dict):
            _merge(base[k], v, source, key + ".")
        else:
            base[k] = check_value(key, base[k], v, source)
    return base


def _acyclic(value, where, path=()) -> None:
    """YAML anchors can make a value contain itself (`a: &x [*x]`): refuse it in one line, before any check or
    JSON dump recurses into it."""
    if isinstance(value, (dict, list)):
        if id(value) in path:
            raise HaseError("recursive YAML value (an alias refers to a node that contains it)", where)
        for v in (value.values() if isinstance(value, dict) else value):
            _acyclic(v, where, path + (id(value),))


def parse_override(item: str) -> dict:
    if "=" not in item:
        raise HaseError(f"--set expects KEY=VALUE, got '{item}'")
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError as e:
        raise HaseError(f"--set {key}: bad YAML value ({e})")
    _acyclic(value, f"--set {key}")
    out: dict = {}
    node = out
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def _deep_update(acc: dict, upd: dict) -> dict:
    for k, v in upd.items():
        if isinstance(v, dict) and isinstance(acc.get(k), dict):
            _deep_update(acc[k], v)
        else:
            acc[k] = copy.deepcopy(v)
    return acc


def combine_overrides(items, into=None) -> dict:
    """The --set items as one nested mapping, later items merged key by key into earlier ones (a mapping such as
    pin_dims collects every --set pin_dims.NAME=N, where one --set replaces config.yaml's whole)."""
    acc = {} if into is None else into
    for item in items:
        _deep_update(acc, parse_override(item))
    return acc


def load_yaml(path: Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise HaseError("config file not found", path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise HaseError(f"not valid YAML ({str(e).splitlines()[0]})", path)
    _acyclic(data, path)
    if not isinstance(data, dict):
        raise HaseError("config must be a mapping", path)
    return data


def resolve(defaults: dict, config_path=None, overrides=(), device=None) -> dict:
    cfg = copy.deepcopy(defaults)
    if config_path is not None:
        _merge(cfg, load_yaml(config_path), str(config_path))
    given = {}
    for item in overrides:   # merged with the earlier --set items: pin_dims.a=1 then pin_dims.b=2 keeps both
        _merge(cfg, combine_overrides([item], given), f"--set {item}")
    if device is not None:
        if "device" not in cfg:
            raise HaseError("this phase has no 'device' setting")
        cfg["device"] = device
    return cfg


def from_args(args, defaults: dict, required=()) -> dict:
    """The resolved config; each key in `required` must be set (non-empty), else one line naming it."""
    cfg = resolve(defaults, args.config, args.overrides, args.device)
    for k in required:
        if not cfg[k]:
            raise HaseError(f"config {k} is required")
    return cfg


def save_resolved(cfg: dict, out_dir: Path, name: str = "resolved_config.json", extra=None) -> Path:
    data = {"config": cfg}
    if extra:
        data.update(extra)
    path = Path(out_dir) / name
    paths.atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")
    return path
