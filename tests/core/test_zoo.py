from sklearn.ensemble import (
    ExtraTreesRegressor,
    GradientBoostingRegressor,
    RandomForestRegressor,
)
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from ensemble_bo.core.zoo import make_model


def test_mlp_layers_follow_the_conditional_configuration():
    common = {"learning_rate_init": 1e-3, "activation": "tanh", "units_1": 7}
    one = make_model("mlp_regressor", {**common, "n_hidden_layers": 1}, 0)
    two = make_model("mlp_regressor", {**common, "n_hidden_layers": 2, "units_2": 3}, 0)
    assert isinstance(one, Pipeline) and isinstance(one.steps[0][1], StandardScaler)
    assert one[-1].hidden_layer_sizes == (7,) and two[-1].hidden_layer_sizes == (7, 3)
    assert two[-1].activation == "tanh" and two[-1].random_state == 0


def test_forest_method_picks_breiman_or_extremely_randomized_trees():
    params = {"bootstrap": False, "max_features": 0.3}
    breiman = make_model("random_forest_regressor", {**params, "method": "breiman"}, 1)
    extra = make_model(
        "random_forest_regressor", {**params, "method": "extra_trees"}, 1
    )
    assert type(breiman) is RandomForestRegressor and type(extra) is ExtraTreesRegressor
    assert (
        extra.n_estimators == 100
        and extra.bootstrap is False
        and extra.max_features == 0.3
    )


def test_gradient_boosting_takes_the_huber_quantile():
    model = make_model(
        "gradient_boosting_regressor",
        {"max_depth": 3, "learning_rate": 0.1, "loss": "huber", "alpha": 0.8},
        2,
    )
    assert isinstance(model, GradientBoostingRegressor)
    assert (model.loss, model.alpha, model.n_estimators) == ("huber", 0.8, 100)


def test_scale_sensitive_models_are_scaled():
    for name, params in [
        ("svr", {"C": 1.0, "gamma": 0.1, "epsilon": 0.1}),
        ("elastic_net", {"alpha": 0.1, "l1_ratio": 0.5, "max_iter": 1000}),
    ]:
        assert isinstance(make_model(name, params, 0).steps[0][1], StandardScaler)
