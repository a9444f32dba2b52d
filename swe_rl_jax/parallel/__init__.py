"""Device meshes, logical-axis → mesh-axis rules, sharded parameter placement, multi-host init."""
from swe_rl_jax.parallel.mesh import MESH_AXES, MeshConfig, make_mesh, parse_mesh
from swe_rl_jax.parallel.rules import (
    RULE_PRESETS,
    Rules,
    GATHERED_AXES,
    MeshSharding,
    activation_sharding,
    get_rules,
    logical_spec,
    param_shardings,
    rules_for_mesh,
)
from swe_rl_jax.parallel.placement import init_sharded_params, load_hf_sharded, place_on

__all__ = [
    "MESH_AXES", "MeshConfig", "make_mesh", "parse_mesh",
    "RULE_PRESETS", "Rules", "GATHERED_AXES", "MeshSharding", "activation_sharding", "get_rules", "logical_spec", "param_shardings",
    "rules_for_mesh",
    "init_sharded_params", "load_hf_sharded", "place_on",
]
