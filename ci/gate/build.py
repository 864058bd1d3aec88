"""What the gate builds from the refreshed series: the stock image of the judged commit, and the
deployable artifacts ``--build`` asks for (``patchset.build``: the patched wheel, the image overlay).

``patchset.build`` and the nightly image rule are imported by a run that builds (or has a
``base_image`` to move), not by one that finds nothing new.
"""

from __future__ import annotations

from pathlib import Path

from patchset.ci.gate.run import Judging
from patchset.errors import InputError
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Ledger, Target
from patchset.upstream.bases import version_like
from patchset.upstream.releases import is_spec_like, parse_spec


def image(j: Judging, work_ledger: Path | None, base_sha: str) -> None:
    """The stock image of the judged commit (``nightly.image_for``: the target's ``base_image``
    with its tag moved from the base to the judged commit or release), recorded in the report and
    written into the refreshed series; when it cannot be derived, the reason (``--build overlay``
    then refuses rather than build on the old base's image)."""
    t, label = j.target, j.label
    if not t.base_image:
        return
    from patchset.upstream.nightly import image_for

    base_version = t.base_version or (
        parse_spec(t.base).version if is_spec_like(t.base) else version_like(t.base) or ""
    )
    version = parse_spec(label).version if is_spec_like(label) else (version_like(label) or "")
    name, why = image_for(
        t.base_image, base=t.base, base_version=base_version, base_commit=base_sha, version=version, commit=j.sha
    )
    j.report.image = {"base_image": t.base_image, "image": name, "why": why}
    if work_ledger is None:
        return
    if why:
        j.report.warnings.append(f"base_image left as it is in the refreshed series: {why}")
        return
    if name != t.base_image:
        with ledger_mod.edit(work_ledger) as e:
            e.doc["targets"][t.name]["base_image"] = name
        j.log.log(f"image: {t.base_image} -> {name}")


def build(j: Judging, refreshed: Ledger, t: Target, tree: Path) -> None:
    """``--build``: the deployable artifacts of the refreshed series (``patchset.build``)."""
    from patchset.build.overlay import OverlayBuild, build_overlay
    from patchset.build.wheel import WheelBuild, build_wheel, fetch_wheel

    for kind in j.job.build:
        j.log.note("build", kind)
        rep: OverlayBuild | WheelBuild
        if kind == "overlay":
            stock = j.report.image
            if not stock.get("image"):
                raise InputError(
                    f"--build overlay: no image to build on for {j.label}: {stock.get('why', 'unknown')}",
                    hint="set base_image to an image whose tag names the base (…:v<version>, …:nightly-<commit>), "
                    "or build the overlay yourself: `patchset build overlay --base-image IMAGE`",
                )
            rep = build_overlay(refreshed, t, tree, j.out_dir / "image", layout="source", base_image=stock["image"])
        elif j.up.kind != "releases":
            raise InputError(
                "--build wheel needs a release to take the wheel from; this upstream is a git repository",
                hint="judge a release (--onto PROJECT==VERSION) or build the wheel with `patchset build wheel`",
            )
        else:
            rep = build_wheel(refreshed, t, fetch_wheel(j.label), j.out_dir / "dist")
        j.report.build[kind] = rep.to_json()
        j.log.log(f"build {kind}: {rep.outcome}: {rep.message}")
