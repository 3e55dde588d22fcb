"""Config for every phase: defaults in the script, then <phase>/config.yaml, then --set key=value.

Keys are nested; --set takes dotted keys (--set runner.loops=100) and YAML values
(--set batch_sizes=[1,2]). A key that the defaults do not have is an error, wherever it
comes from. The resolved config is saved beside the phase's outputs.
"""
import argparse
import copy
import json
from pathlib import Path

import yaml

from utils import paths
from utils.errors import HaseError


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
FREE_MAPS = {"queries", "pin_dims", "gpus"}


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
            base[k] = v
    return base


def parse_override(item: str) -> dict:
    if "=" not in item:
        raise HaseError(f"--set expects KEY=VALUE, got '{item}'")
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw != "" else ""
    except yaml.YAMLError as e:
        raise HaseError(f"--set {key}: bad YAML value ({e})")
    out: dict = {}
    node = out
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return out


def load_yaml(path: Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise HaseError("config file not found", path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise HaseError(f"not valid YAML ({str(e).splitlines()[0]})", path)
    if not isinstance(data, dict):
        raise HaseError("config must be a mapping", path)
    return data


def resolve(defaults: dict, config_path=None, overrides=(), device=None) -> dict:
    cfg = copy.deepcopy(defaults)
    if config_path is not None:
        _merge(cfg, load_yaml(config_path), str(config_path))
    for item in overrides:
        _merge(cfg, parse_override(item), f"--set {item}")
    if device is not None:
        if "device" not in cfg:
            raise HaseError("this phase has no 'device' setting")
        cfg["device"] = device
    return cfg


def from_args(args, defaults: dict) -> dict:
    return resolve(defaults, args.config, args.overrides, args.device)


def save_resolved(cfg: dict, out_dir: Path, name: str = "resolved_config.json", extra=None) -> Path:
    data = {"config": cfg}
    if extra:
        data.update(extra)
    path = Path(out_dir) / name
    paths.atomic_write_text(path, json.dumps(data, indent=2, default=str) + "\n")
    return path
