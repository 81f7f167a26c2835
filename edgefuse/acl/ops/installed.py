"""Whether an op package with edgefuse's ops is installed where ATC looks, and how to get one.

Why: a model the Ascend optimizer rewrote carries edgefuse custom ops (``optimize --target
Ascend310B4`` turns SiLU into ``edgefuse::Swish``). ATC parses them only through the parser
plugins of an installed edgefuse op package; without one it fails with E19010, "No parser is
registered for Op [%s, optype [%s]]." (the ``ai.onnx::<opset>::<Op>`` key of the node; older
CANN reported E16002, "No ONNX parser is registered for optype [%s]", hiascend canncommercial/700
troublemanagement/troubleshooting/atlaserrorcode_15_0092.html), after minutes and without
saying what is missing. So ``compile``
records the dependency and checks it before ATC: here in Python when it runs ATC itself, and in
``compile.sh`` with the same rule in bash (``check_script``).

Where ATC looks: every directory in ``ASCEND_CUSTOM_OPP_PATH`` (colon-separated; GE searches them
when it compiles a graph: hiascend canncommercial/900 maintenref/envvar/envref_07_0147.html), each
a vendor directory as an install's ``set_env.bash`` adds it (``DIR/vendors/<vendor>``, or
``DIR/<vendor>`` from older installers); and the vendors listed in
``${ASCEND_OPP_PATH}/vendors/config.ini`` (``load_priority=a,b``), each in
``${ASCEND_OPP_PATH}/vendors/<vendor>`` (the default install; op package deployment page,
hiascend canncommercial/700 operatordev/Ascendcopdevg/atlas_ascendc_10_0036.html). A package
holds one op-info library per chip family it was built for,
``op_impl/ai_core/tbe/config/<short_soc>/aic-<short_soc>-ops-info.json`` (the layout of the
package's ``build.sh``/msopgen output, ``<short_soc>`` = ``Soc.short_name``, e.g.
``ascend310b``); ATC looks an op up in the library of the ``--soc_version`` it compiles for, so
the check requires each op's Ascend type as a key (``"EdgefuseSwish"``) of exactly that file: a
package built for ascend310p does not serve Ascend310B4 (ATC would fail with EZ3003, "no
implementation", after minutes). ``EDGEFUSE_SKIP_CUSTOM_OP_CHECK=1`` skips the check for an
install laid out otherwise.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from edgefuse.acl.compile.soc import validate_soc
from edgefuse.acl.ops.spec import OpSpec
from edgefuse.acl.ops.toolkit import CANN_RANGE
from edgefuse.errors import Ref, ToolError

SKIP_VARIABLE = "EDGEFUSE_SKIP_CUSTOM_OP_CHECK"


def install_steps(specs: Sequence[OpSpec], soc: str) -> dict[str, str]:
    """The commands that provide ``specs`` for ``soc``, and the way around them."""
    names = ",".join(spec.name for spec in specs)
    return {
        "build": f"edgefuse ops build --soc {soc} --ops {names} -o OPP_DIR",
        "install": f"on a host with the CANN toolkit ({CANN_RANGE}): bash OPP_DIR/build.sh && "
        "bash OPP_DIR/install.sh (into the toolkit's opp/vendors, found through "
        "vendors/config.ini) or bash OPP_DIR/install.sh DIR and then the `source "
        ".../bin/set_env.bash` line it prints, in every shell that runs atc or the model",
        "without": f"edgefuse compile MODEL --soc {soc} -o BUILD_DIR --no-custom-ops "
        "(the custom ops become their standard-ONNX decompositions)",
    }


def install_hint(specs: Sequence[OpSpec], soc: str) -> str:
    steps = install_steps(specs, soc)
    return (f"build and install edgefuse's op package: `{steps['build']}`, then "
            f"{steps['install']}; or compile without custom ops: `{steps['without']}`")


def vendor_dirs(env: Mapping[str, str] | None = None) -> list[Path]:
    """The vendor directories ATC searches, in its order."""
    env = os.environ if env is None else env
    found = [Path(entry) for entry in env.get("ASCEND_CUSTOM_OPP_PATH", "").split(":") if entry]
    opp = env.get("ASCEND_OPP_PATH")
    config = Path(opp) / "vendors" / "config.ini" if opp else None
    if config is not None and config.is_file():
        for line in config.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "load_priority":
                found += [Path(opp) / "vendors" / v.strip() for v in value.split(",") if v.strip()]
                break
    return found


def ops_info_file(vendor_dir: Path, short_soc: str) -> Path:
    """The op-info library of ``vendor_dir`` for chips of the family ``short_soc``."""
    return (vendor_dir / "op_impl" / "ai_core" / "tbe" / "config" / short_soc
            / f"aic-{short_soc}-ops-info.json")


def _provides(info: Path, specs: Sequence[OpSpec]) -> bool:
    """Whether the op-info library ``info`` has every op of ``specs`` as a key."""
    if not info.is_file():
        return False
    text = info.read_bytes()
    return all(f'"{spec.ascend_type}"'.encode() in text for spec in specs)


def package_with(
    specs: Sequence[OpSpec], soc: str, env: Mapping[str, str] | None = None
) -> Path | None:
    """The first vendor directory whose op-info for ``soc``'s family has every op, or None."""
    short = validate_soc(soc).short_name
    for directory in vendor_dirs(env):
        if _provides(ops_info_file(directory, short), specs):
            return directory
    return None


def built_for_other_socs(
    specs: Sequence[OpSpec], soc: str, env: Mapping[str, str] | None = None
) -> list[str]:
    """``DIR (ascend310p)`` for each package that has the ops, but for other chip families."""
    short = validate_soc(soc).short_name
    found = []
    for directory in vendor_dirs(env):
        config = directory / "op_impl" / "ai_core" / "tbe" / "config"
        others = sorted(
            path.name for path in config.glob("*")
            if path.name != short and _provides(ops_info_file(directory, path.name), specs)
        ) if config.is_dir() else []
        if others:
            found.append(f"{directory} ({', '.join(others)})")
    return found


def require_installed(
    specs: Sequence[OpSpec], soc: str, env: Mapping[str, str] | None = None
) -> Path | None:
    """Where the package with ``specs`` is installed; raises when ATC could not find one."""
    env = os.environ if env is None else env
    if not specs or env.get(SKIP_VARIABLE) == "1":
        return None
    found = package_with(specs, soc, env)
    if found is not None:
        return found
    short = validate_soc(soc).short_name
    elsewhere = built_for_other_socs(specs, soc, env)
    if elsewhere:
        raise ToolError(
            f"the model uses edgefuse custom ops ({', '.join(s.name for s in specs)}) and is "
            f"compiled for {soc}, but the installed op packages provide them only for other "
            f"chips: ATC would fail with EZ3003 (no implementation of the op for {short})",
            context="built for: " + "; ".join(elsewhere),
            hint=f"rebuild the package for this chip: {install_hint(specs, soc)}",
            reference=Ref.CUSTOM_OPS_NOT_INSTALLED,
        )
    searched = [str(path) for path in vendor_dirs(env)] or ["(none: ASCEND_CUSTOM_OPP_PATH is "
                                                            "unset and vendors/config.ini lists "
                                                            "no vendor)"]
    raise ToolError(
        f"the model uses edgefuse custom ops ({', '.join(s.name for s in specs)}), and no "
        f"installed op package provides them for {short}: ATC would fail with E19010 (no "
        "parser is registered for the op type)",
        context="searched: " + ", ".join(f"{path}/{ops_info_file(Path(), short)}"
                                          for path in searched),
        hint=install_hint(specs, soc),
        reference=Ref.CUSTOM_OPS_NOT_INSTALLED,
    )


CHECK_SCRIPT = r"""
# ---- edgefuse custom ops: ATC fails with E19010 unless their op package is installed ---------
# Searches what ATC searches: ASCEND_CUSTOM_OPP_PATH, then the vendors in
# ${ASCEND_OPP_PATH}/vendors/config.ini; a package counts when the op-info library of this
# chip family names every op. EDGEFUSE_SKIP_CUSTOM_OP_CHECK=1 skips the check.
EDGEFUSE_OPS=(@OPS@)
EDGEFUSE_OPS_INFO=@OPS_INFO@
edgefuse_vendor_dirs() {
  local entry line vendor
  local -a entries vendors
  IFS=':' read -r -a entries <<< "${ASCEND_CUSTOM_OPP_PATH:-}"
  # ${a[@]+...}: an empty array under `set -u` on bash < 4.4
  for entry in ${entries[@]+"${entries[@]}"}; do [ -z "$entry" ] || printf '%s\n' "$entry"; done
  local config="${ASCEND_OPP_PATH:-}/vendors/config.ini"
  if [ -n "${ASCEND_OPP_PATH:-}" ] && [ -f "$config" ]; then
    line="$(grep -E '^[[:space:]]*load_priority[[:space:]]*=' "$config" | head -n 1 || true)"
    IFS=',' read -r -a vendors <<< "${line#*=}"
    for vendor in ${vendors[@]+"${vendors[@]}"}; do
      vendor="${vendor//[[:space:]]/}"
      [ -z "$vendor" ] || printf '%s\n' "$ASCEND_OPP_PATH/vendors/$vendor"
    done
  fi
}
edgefuse_check_custom_ops() {
  [ "${EDGEFUSE_SKIP_CUSTOM_OP_CHECK:-}" != 1 ] || return 0
  local dir op complete
  while IFS= read -r dir; do
    [ -f "$dir/$EDGEFUSE_OPS_INFO" ] || continue
    complete=1
    for op in "${EDGEFUSE_OPS[@]}"; do
      grep -qsF -- "\"$op\"" "$dir/$EDGEFUSE_OPS_INFO" || { complete=0; break; }
    done
    if [ "$complete" = 1 ]; then echo "edgefuse custom ops: found in $dir"; return 0; fi
  done < <(edgefuse_vendor_dirs)
  cat >&2 <<'EDGEFUSE_EOF'
@MESSAGE@
EDGEFUSE_EOF
  exit 2
}
edgefuse_check_custom_ops
"""


def check_script(specs: Sequence[OpSpec], soc: str) -> str:
    """The bash that ``compile.sh`` runs before ``atc`` when the model uses ``specs``."""
    steps = install_steps(specs, soc)
    info = ops_info_file(Path(), validate_soc(soc).short_name).as_posix()
    message = "\n".join([
        f"error: this model uses edgefuse custom ops ({', '.join(s.name for s in specs)}), and "
        f"no installed op package provides them for {soc};",
        "ATC would fail with E19010 (No parser is registered for Op [...]).",
        "Searched ASCEND_CUSTOM_OPP_PATH and ${ASCEND_OPP_PATH}/vendors/config.ini for "
        f"{info} (a package built for another chip does not count).",
        f"  1. {steps['build']}",
        f"  2. {steps['install']}",
        f"or compile without custom ops: {steps['without']}",
    ])
    if "EDGEFUSE_EOF" in message:  # cannot happen with validated soc names; keeps the heredoc
        raise ValueError("the message would end the heredoc early")
    ops = " ".join(shlex.quote(spec.ascend_type) for spec in specs)
    return (CHECK_SCRIPT.replace("@OPS@", ops).replace("@OPS_INFO@", shlex.quote(info))
            .replace("@MESSAGE@", message))
