"""A minimal Isaac asset root for Isaac-Cartpole, built from what the installed wheels ship.

Isaac Lab reads its assets from ISAACSIM_ASSET_ROOT (a public URL by default). The test cluster's
nodes have no internet, like most compute nodes, so the suite points them at this folder:

    ROOT/Isaac/IsaacLab/Robots/Classic/Cartpole/cartpole.usd
        the newton wheel's cartpole_single_pendulum.usda (a flattened copy of Isaac Lab's own
        cartpole), its default prim renamed to the name Isaac Lab's config looks for
    ROOT/Isaac/IsaacLab/Environments/Grid/default_ground_plane_checker_v1/default_ground_plane.usda
        a plane that collides

Run with Isaac Lab's interpreter (it needs pxr and newton):  python isaac_asset_root.py ROOT (not named isaaclab_assets: that is a package of Isaac Lab)
"""
from __future__ import annotations

import os
import sys
import tempfile

import newton.examples
from pxr import Usd, UsdGeom, UsdPhysics

CARTPOLE = "Isaac/IsaacLab/Robots/Classic/Cartpole/cartpole.usd"
GROUND = "Isaac/IsaacLab/Environments/Grid/default_ground_plane_checker_v1/default_ground_plane.usda"


def cartpole(root: str) -> None:
    src = os.path.join(os.path.dirname(newton.examples.__file__), "assets", "cartpole_single_pendulum.usda")
    with open(src, encoding="utf-8") as f:
        text = f.read()
    # Isaac Lab's CARTPOLE_CFG spawns the asset's default prim under the name "cartpole".
    text = text.replace('defaultPrim = "cartPole"', 'defaultPrim = "cartpole"', 1)
    out = os.path.join(root, CARTPOLE)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".usda", dir=os.path.dirname(out), delete=False) as tmp:
        tmp.write(text)
    try:
        Usd.Stage.Open(tmp.name).Export(out)
    finally:
        os.unlink(tmp.name)


def ground(root: str) -> None:
    out = os.path.join(root, GROUND)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    stage = Usd.Stage.CreateNew(out)
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
    stage.SetDefaultPrim(UsdGeom.Xform.Define(stage, "/GroundPlane").GetPrim())
    plane = UsdGeom.Plane.Define(stage, "/GroundPlane/CollisionPlane")
    plane.CreateAxisAttr("Z")
    UsdPhysics.CollisionAPI.Apply(plane.GetPrim())
    stage.GetRootLayer().Save()


if __name__ == "__main__":
    cartpole(sys.argv[1])
    ground(sys.argv[1])
    print(f"asset root: {sys.argv[1]}")
