"""Optimizers by name: one `kind` switches the engine of every method."""

import pytest

from ensemble_bo.core.optimizer import GPEIOptimizer, GridSearch, RandomSearch
from ensemble_bo.core.optimizer_kinds import OPTIMIZER_KINDS, make_optimizer
from ensemble_bo.core.random_forest import RandomForestOptimizer
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.tpe import TPEOptimizer

SPACE = SearchSpace.from_dict(
    {
        "x": {"type": "float", "low": -2.0, "high": 2.0},
        "y": {"type": "float", "low": -2.0, "high": 2.0},
    }
)
# conf/base's GP block, as a user who sets only `kind` passes it to every kind
GP_BLOCK = {
    "n_initial": 3,
    "hyperparameters": "slice",
    "acquisition": "ei",
    "gp_restarts": 3,
    "n_candidates": 256,
    "n_local_starts": 5,
}


def test_optimizers_by_name():
    assert isinstance(make_optimizer(SPACE, 0, kind="random"), RandomSearch)
    grid = make_optimizer(SPACE, 0, kind="grid", points_per_dimension=2)
    assert isinstance(grid, GridSearch) and len(grid._grid) == 4
    gp = make_optimizer(SPACE, 0, **GP_BLOCK)  # kind defaults to gp
    assert isinstance(gp, GPEIOptimizer) and gp.hyperparameters == "slice"
    assert gp.n_candidates == 256


@pytest.mark.parametrize("kind", OPTIMIZER_KINDS)
def test_switching_kind_is_one_option_the_others_kept(kind):
    optimizer = make_optimizer(SPACE, 0, kind=kind, **GP_BLOCK)
    assert optimizer.ask().config.keys() == {"x", "y"}


def test_the_block_s_options_reach_the_kind_that_reads_them():
    tpe = make_optimizer(SPACE, 0, kind="tpe", **GP_BLOCK, n_ei_candidates=48)
    assert isinstance(tpe, TPEOptimizer)
    assert (tpe.n_initial, tpe.n_ei_candidates) == (3, 48)
    forest = make_optimizer(SPACE, 0, kind="rf", **GP_BLOCK, n_trees=20)
    assert isinstance(forest, RandomForestOptimizer)
    assert (forest.n_initial, forest.n_candidates, forest.n_trees) == (3, 256, 20)


def test_an_unknown_kind_or_an_option_no_kind_reads_is_refused():
    with pytest.raises(ValueError, match="optimizer kind='smac' is not one of"):
        make_optimizer(SPACE, 0, kind="smac")
    with pytest.raises(ValueError, match=r"options \['n_intial'\] are read by no kind"):
        make_optimizer(SPACE, 0, kind="tpe", n_intial=5)
    # a kind's own validation still names the bad value
    with pytest.raises(ValueError, match="n_initial must be an integer >= 1, got 0"):
        make_optimizer(SPACE, 0, kind="tpe", n_initial=0)
