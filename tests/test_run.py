"""End to end: `kedro run` on real bundled data into a temporary MLflow store."""

import hashlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import sklearn
import yaml
from mlflow.tracking import MlflowClient

from ensemble_bo import EnsembleSearch, provenance
from ensemble_bo.api import default_parameters
from ensemble_bo.core.preparation import split_dataset
from ensemble_bo.core.result_files import read_result
from ensemble_bo.tracking.model_integrity import verify_model
from tests.support import (
    CHEAP_AUTO,
    CHEAP_MODEL,
    ENSEMBLE_BO,
    git,
    git_project,
    kedro,
    serve_csv,
)

# End to end: real `kedro run`s (deselect locally with -m 'not slow').
pytestmark = pytest.mark.slow

# concrete_run: the suite's one search of the default regression space,
# segor_sklearn (the other searches name the cheap tree, tests/support.py).
SMALL = "budget=12,ensemble.size=4,segor.optimizer.n_initial=4,segor.optimizer.gp_restarts=1"


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A git-committed copy of the project (conf + a few datasets) and its own MLflow store."""
    return git_project(
        tmp_path_factory.mktemp("project") / "project", ("concrete", "boston", "wine")
    )


def store_uri(project):
    """The project's own MLflow store."""
    return f"sqlite:///{project / 'store' / 'mlflow.db'}"


def kedro_run(project, *args):
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": store_uri(project),
        "DO_NOT_TRACK": "true",
    }
    (project / "store").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "kedro", "run", *args],
        check=False,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def client_for(project):
    mlflow.set_tracking_uri(store_uri(project))
    return MlflowClient(store_uri(project))


def verified_model(uri):
    """The logged model at `uri`, loaded once its files match its run's record."""
    check = verify_model(uri)
    assert check.matches, check.report()
    return mlflow.pyfunc.load_model(uri)


def latest_run(client):
    experiment = client.get_experiment_by_name("ensemble_bo")
    return client.search_runs(
        [experiment.experiment_id], order_by=["attributes.start_time DESC"]
    )[0]


def finished_run(project, pipeline, params):
    """The MLflow run of `kedro run --pipelines=<pipeline> --params <params>`,
    which must succeed."""
    completed = kedro_run(project, f"--pipelines={pipeline}", "--params", params)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return latest_run(client_for(project))


@pytest.fixture(scope="module")
def concrete_run(project):
    return finished_run(project, "segor", f"{SMALL},seed=0")


def test_run_logs_parameters_and_provenance(project, concrete_run):
    params, tags = concrete_run.data.params, concrete_run.data.tags
    assert (
        params["budget"] == "12"
        and params["seed"] == "0"
        and params["dataset"] == "concrete"
    )
    assert params["ensemble.size"] == "4" and params["ensemble.variant"] == "f-m"
    # the default space: every regression family, one conditional space
    assert params["segor.model"] == "segor_sklearn"
    assert params["models.segor_sklearn.regressor.type"] == "categorical"
    assert params["models.decision_tree_regressor.max_depth.high"] == "30"
    assert params["data_processing.test_size"] == "0.33"
    assert (
        params["dataset_info.rows"] == "1030"
        and params["dataset_info.task"] == "regression"
    )
    assert len(params["dataset_info.fingerprint"]) == 64
    assert tags["mlflow.source.git.commit"] == git(project, "rev-parse", "HEAD")
    assert tags["git.dirty"] == "false"
    assert tags["kedro.pipeline"] == "segor"
    assert concrete_run.info.status == "FINISHED"
    # what a rerun needs: the env, the overrides as given, the data's and lock's bytes
    assert tags["kedro.env"] == ""  # Kedro's default
    assert json.loads(tags["kedro.runtime_params"]) == {
        "budget": 12,
        "ensemble": {"size": 4},
        "segor": {"optimizer": {"n_initial": 4, "gp_restarts": 1}},
        "seed": 0,
    }
    assert tags["data.file"] == "data/01_raw/concrete.csv"
    assert (
        tags["data.sha256"]
        == hashlib.sha256(
            (project / "data" / "01_raw" / "concrete.csv").read_bytes()
        ).hexdigest()
    )
    assert (
        tags["env.lock_sha256"]
        == hashlib.sha256((project / "requirements.lock").read_bytes()).hexdigest()
    )
    assert tags["env.python"] == platform.python_version()
    assert tags["env.package.scikit-learn"] == sklearn.__version__
    client = client_for(project)
    resolved = yaml.safe_load(
        Path(
            client.download_artifacts(concrete_run.info.run_id, "config/parameters.yml")
        ).read_text()
    )
    assert resolved["budget"] == 12 and resolved["ensemble"]["size"] == 4
    assert resolved["models"]["decision_tree_regressor"]["max_depth"]["high"] == 30


def test_untracked_inputs_make_a_run_dirty_and_are_named(project):
    (project / "data" / "01_raw" / "highcard.csv").write_text("x,target\n1,2\n")
    (project / "notes.txt").write_text("not an input of a run")
    try:
        tags = provenance.git_tags(project)
    finally:
        (project / "data" / "01_raw" / "highcard.csv").unlink()
        (project / "notes.txt").unlink()
    assert tags["git.dirty"] == "true"
    assert tags["git.dirty_files"] == "data/01_raw/highcard.csv"
    assert provenance.git_tags(project)["git.dirty"] == "false"


def test_run_logs_stepped_metrics_for_every_iteration(project, concrete_run):
    client = client_for(project)
    run_id = concrete_run.info.run_id
    for name in (
        "cv_loss_ensemble",
        "cv_loss_best_single",
        "ensemble_size",
        "fit_seconds",
    ):
        history = client.get_metric_history(run_id, name)
        # every step once, and the last again: the final record, whose
        # ensemble the bagged weighting chose again from the pool
        assert sorted(m.step for m in history) == [*range(12), 11], name
    ensemble = client.get_metric_history(run_id, "cv_loss_ensemble")
    # the logged curve is the one the trial history table holds, step for step
    history = pd.read_csv(
        client.download_artifacts(run_id, "tables/segor_trial_history.csv")
    ).sort_values("iteration")
    assert history["action"].iloc[-1] == "bag"
    logged = {(m.step, m.value) for m in ensemble}
    table = history["cv_loss_ensemble_after"].to_numpy()
    for step, value in enumerate(table):
        assert any(s == step and np.isclose(v, value, rtol=1e-12) for s, v in logged)
    # EI is only defined once the GP takes over after the 4 initial points
    assert sorted(
        m.step for m in client.get_metric_history(run_id, "acquisition_value")
    ) == [*range(4, 12), 11]
    final = concrete_run.data.metrics
    assert 0 < final["ensemble_mutual_information"] < 14
    assert (
        0 < final["test_mse_ensemble"] < 1 and 0 < final["test_mse_single_best"] < 1.5
    )
    assert final["trials_failed"] == 0


def test_run_logs_artifacts_and_a_loadable_model(project, concrete_run, tmp_path):
    client = client_for(project)
    run_id = concrete_run.info.run_id
    # the Dataset column of the runs table: the raw file, with its digest
    (dataset_input,) = client.get_run(run_id).inputs.dataset_inputs
    assert dataset_input.dataset.name == "concrete"
    assert dataset_input.dataset.digest and "data/01_raw/concrete.csv" in (
        dataset_input.dataset.source
    )
    artifacts = {a.path for a in client.list_artifacts(run_id, "tables")} | {
        a.path for a in client.list_artifacts(run_id)
    }
    # the figures at the root, where MLflow's compare view shows runs side by side
    assert {
        "tables/segor_trial_history.csv",
        "tables/segor_ensemble_composition.csv",
        "convergence_plot.png",
        "diversity_heatmap.png",
        "uncertainty_plot.png",
        "cost_plot.png",
        "tables/segor_leaderboard.csv",
        "tables/segor_feature_importance.csv",
        "feature_importance_plot.png",
    } <= artifacts
    board = pd.read_csv(
        client.download_artifacts(run_id, "tables/segor_leaderboard.csv")
    )
    assert len(board) == 12 and board["weight"].sum() == pytest.approx(1.0)
    assert board["cv_loss"].is_monotonic_increasing
    # the conformal model's test coverage and width at each reported level
    metrics = concrete_run.data.metrics
    for level in (80, 90, 95):
        assert 0.6 <= metrics[f"test_interval_coverage_{level}"] <= 1.0
        assert metrics[f"test_interval_width_{level}"] > 0
    assert (
        metrics["test_interval_width_80"]
        <= metrics["test_interval_width_90"]
        <= metrics["test_interval_width_95"]
    )
    history = pd.read_csv(
        client.download_artifacts(run_id, "tables/segor_trial_history.csv")
    )
    assert len(history) == 12 and history["final_weight"].sum() == pytest.approx(1.0)
    # every trial a family of segor_sklearn (the default space), several tried
    families = default_parameters()["models"]["segor_sklearn"]["regressor"]["choices"]
    assert set(history["regressor"]) <= set(families)
    assert history["regressor"].nunique() > 1 and (history["status"] == "ok").all()
    # the pool, with every model's out-of-fold predictions, for a later posthoc run
    pool = read_result(
        client.download_artifacts(run_id, "pools/segor_search_result", str(tmp_path))
    ).pool
    assert len(pool) == 12 and pool.predictions.shape[0] == 12

    model = verified_model(f"runs:/{run_id}/segor_model")
    features = pd.read_csv(project / "data" / "01_raw" / "concrete.csv").drop(
        columns="target"
    )
    predictions = np.asarray(model.predict(features.head(20)))
    assert predictions.shape == (20,) and np.all(np.isfinite(predictions))
    # predictions are in the target's own units (MPa), not standardized
    assert 5 < predictions.mean() < 80
    intervals = model.predict(features.head(20), params={"coverage": 0.9})
    assert (intervals["lower"] < intervals["upper"]).all()


def test_classification_dataset_is_refused_by_segor_before_any_run_is_opened(
    project,
):
    client = client_for(project)
    experiment = client.get_experiment_by_name("ensemble_bo")
    before = {r.info.run_id for r in client.search_runs([experiment.experiment_id])}
    completed = kedro_run(
        project, "--pipelines=segor", "--params", f"{SMALL},dataset=wine"
    )
    assert completed.returncode != 0
    message = " ".join(completed.stderr.split())  # rich wraps long lines
    assert (
        "dataset 'wine' is a classification task and segor builds regression "
        "ensembles; methods for classification: ['sego'," in message
    )
    # refused while checking the inputs: no MLflow run was opened for it
    after = {r.info.run_id for r in client.search_runs([experiment.experiment_id])}
    assert after == before


def test_sego_on_a_classification_dataset_logs_a_voting_model(project):
    run = finished_run(
        project,
        "sego",
        "dataset=wine,budget=8,sego.ensemble_size=4,segor.optimizer.n_initial=4",
    )
    client = client_for(project)
    assert run.info.run_name == (
        "sego-wine-0 budget=8 sego.ensemble_size=4 segor.optimizer.n_initial=4"
    )
    assert run.data.params["sego.model"] == "sego_sklearn"
    metrics = run.data.metrics
    assert 0.0 <= metrics["test_error_ensemble"] <= 1.0
    assert 0.0 <= metrics["ensemble_disagreement"] <= 1.0
    # 8 iterations, the last one again with the ensemble the bagged weighting ships
    steps = client.get_metric_history(run.info.run_id, "cv_loss_ensemble")
    assert sorted(m.step for m in steps) == [*range(8), 7]
    raw = pd.read_csv(project / "data" / "01_raw" / "wine.csv")
    model = verified_model(f"runs:/{run.info.run_id}/sego_model")
    predicted = np.asarray(model.predict(raw.drop(columns="target").head(20)))
    assert set(predicted) <= set(raw["target"])
    # the package ships with the model, so it loads where ensemble_bo is not installed
    code = {a.path for a in client.list_artifacts(run.info.run_id, "sego_model/code")}
    assert "sego_model/code/ensemble_bo" in code


def test_a_bagged_stacked_final_model_is_logged_verified_and_served(project):
    run = finished_run(
        project,
        "sego",
        "dataset=wine,budget=4,sego.ensemble_size=3,sego.optimizer.n_initial=4,"
        "final_model=bagged,stacking=true,seed=5",
    )
    assert run.data.params["final_model"] == "bagged"
    metrics = run.data.metrics
    chosen = metrics["stacking_cv_loss"] < metrics["stacking_ensemble_cv_loss"]
    assert metrics["stacking_chosen"] == float(chosen)
    uri = f"runs:/{run.info.run_id}/sego_model"
    check = verify_model(uri)
    assert check.matches, check.report()
    assert "ensemble_bo.core.bagging.BaggedClassifier" in check.trusted_types
    stacked = "ensemble_bo.core.estimator.StackedClassifier"
    assert (stacked in check.trusted_types) == chosen
    raw = pd.read_csv(project / "data" / "01_raw" / "wine.csv")
    features = raw.drop(columns="target").head(20)
    served = mlflow.pyfunc.load_model(uri)
    local = mlflow.sklearn.load_model(uri)
    # the conformal model: the bagged ensemble, and the plain one per fold
    members = local.estimator_.named_steps["ensemble"].estimators_
    assert all(len(member.estimators_) == 5 for member in members)  # the 5 folds
    assert len(local.fold_estimators_) == 5
    np.testing.assert_array_equal(served.predict(features), local.predict(features))
    sets = local.predict_set(features, 0.9)
    assert sets.shape == (20, 3) and sets.dtype == bool


@pytest.mark.parametrize("method", ["esmbo", "ers"])
def test_agnostic_bayes_pipelines_run_end_to_end(project, method):
    run = finished_run(
        project,
        method,
        f"budget=8,segor.optimizer.n_initial=4,ers.n_samples=200,{CHEAP_AUTO}",
    )
    client = client_for(project)
    composition = pd.read_csv(
        client.download_artifacts(
            run.info.run_id, f"tables/{method}_ensemble_composition.csv"
        )
    )
    assert composition["weight"].sum() == pytest.approx(1.0)
    assert run.data.metrics["test_mse_ensemble"] > 0


def test_the_logged_model_serves_with_mlflow_models_predict(
    project, concrete_run, tmp_path
):
    features = pd.read_csv(project / "data" / "01_raw" / "concrete.csv").drop(
        columns="target"
    )
    features.head(5).to_csv(tmp_path / "input.csv", index=False)
    served = serve_csv(
        f"runs:/{concrete_run.info.run_id}/segor_model",
        tmp_path / "input.csv",
        store_uri(project),
    )
    loaded = verified_model(f"runs:/{concrete_run.info.run_id}/segor_model")
    np.testing.assert_allclose(served, loaded.predict(features.head(5)), rtol=1e-12)


@pytest.fixture(scope="module")
def single_best_run(project):
    """`single_best_run(method)`: the module's one run of that single-best
    pipeline (made on first use), 8 trials of the cheap tree."""
    runs = {}

    def run_of(method):
        if method not in runs:
            runs[method] = finished_run(
                project,
                method,
                # a time budget the 8 trials do not reach: the trials end the search
                f"budget=8,time_budget=300,segor.optimizer.n_initial=4,{CHEAP_AUTO}",
            )
        return runs[method]

    return run_of


@pytest.mark.parametrize("method", ["smbo", "random_search"])
def test_single_best_pipelines_log_their_own_run(project, single_best_run, method):
    client = client_for(project)
    run = single_best_run(method)
    assert run.info.run_name.startswith(f"{method}-concrete-0 budget=8 ")
    assert run.data.params[f"{method}.model"] == "auto"
    assert run.data.params["default_models.regression"] == CHEAP_MODEL
    # the time split every run logs
    assert run.data.params["time_budget"] == "300"
    metrics = run.data.metrics
    assert metrics["trials"] == 8 and metrics["time_budget_reached"] == 0
    assert 0 < metrics["search_seconds"] < 300 and metrics["refit_seconds"] > 0
    # the whole run holds the search and the refit, and more (reports, logging)
    assert metrics["run_seconds"] > metrics["search_seconds"] + metrics["refit_seconds"]
    assert (
        run.data.metrics["test_mse_ensemble"]
        == run.data.metrics["test_mse_single_best"]
    )
    assert run.data.metrics["ensemble_size"] == 1
    tables = {a.path for a in client.list_artifacts(run.info.run_id, "tables")}
    assert f"tables/{method}_trial_history.csv" in tables
    # no fidelity schedule: no rung evaluations to log
    assert f"tables/{method}_rung_history.csv" not in tables
    model = verified_model(f"runs:/{run.info.run_id}/{method}_model")
    features = pd.read_csv(project / "data" / "01_raw" / "concrete.csv").drop(
        columns="target"
    )
    assert np.isfinite(model.predict(features.head(3))).all()


def test_a_multi_fidelity_run_logs_its_rung_evaluations_and_what_it_spent(project):
    run = finished_run(
        project,
        "segor",
        "budget=6,segor.fidelity.scheduler=hyperband,segor.fidelity.eta=2,"
        f"segor.optimizer.n_initial=4,segor.model={CHEAP_MODEL}",
    )
    client = client_for(project)
    assert run.data.params["segor.fidelity.scheduler"] == "hyperband"
    metrics = run.data.metrics
    assert 0 < metrics["fidelity_full_equivalents"] <= 6
    spent = client.get_metric_history(run.info.run_id, "fidelity_spent")
    assert len(spent) >= 1 and spent[-1].value <= 6
    rungs = pd.read_csv(
        client.download_artifacts(run.info.run_id, "tables/segor_rung_history.csv")
    )
    # every evaluation: the first bracket's 4 on 1 fold, 2 of them on 2, 1 on 5
    first = rungs[rungs["bracket"] == 0]
    assert first.groupby("rung")["resource"].agg(["first", "size"]).values.tolist() == [
        [1, 4],
        [2, 2],
        [5, 1],
    ]
    assert first.groupby("rung")["promoted"].sum().tolist() == [2, 1, 0]
    history = pd.read_csv(
        client.download_artifacts(run.info.run_id, "tables/segor_trial_history.csv")
    )
    # the top rung's evaluations are the pool's trials, in order
    joined = rungs[rungs["trial"] >= 0]
    assert joined["trial"].tolist() == history["trial"].tolist()
    top_rungs = rungs.groupby("bracket")["rung"].max()
    assert (joined["rung"].to_numpy() == top_rungs[joined["bracket"]].to_numpy()).all()
    assert rungs.loc[rungs["rung"] == 0, "objective"].notna().all()


def test_posthoc_selects_from_the_pool_an_earlier_run_saved_and_reruns_the_same(
    project, single_best_run
):
    source = single_best_run("smbo")
    run = finished_run(
        project,
        "posthoc",
        "posthoc_source=smbo,posthoc.max_size=8,posthoc.weighting=bfgs",
    )
    client = client_for(project)
    assert run.data.params["posthoc_source"] == "smbo"
    # the latest finished smbo run's pool, downloaded from the store
    assert run.data.tags["pool_source"] == (
        f"runs:/{source.info.run_id}/pools/smbo_search_result"
    )
    assert run.data.params["posthoc.weighting"] == "bfgs"
    # the same single best model as the smbo run, refit the same way
    assert (
        run.data.metrics["test_mse_single_best"]
        == source.data.metrics["test_mse_single_best"]
    )
    composition = pd.read_csv(
        client.download_artifacts(
            run.info.run_id, "tables/posthoc_ensemble_composition.csv"
        )
    )
    assert composition["weight"].sum() == pytest.approx(1.0)
    assert set(composition["trial"]) <= set(range(8))
    steps = client.get_metric_history(run.info.run_id, "cv_loss_ensemble")
    # 8 greedy steps, then the BFGS reweighting of the kept prefix (the best
    # from the warm start's 3 models on), never worse than it
    assert sorted(m.step for m in steps) == list(range(9))
    by_step = {m.step: m.value for m in steps}
    assert by_step[8] <= min(by_step[step] for step in range(2, 8)) + 1e-12
    # its rerun reads the same pool from the store, as data, and ends the same
    rerun = kedro(
        project,
        "rerun",
        run.info.run_id,
        tracking_uri=store_uri(project),
        command=ENSEMBLE_BO,
    )
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert f"(rerun of {run.info.run_id}) has the same" in rerun.stdout


def test_the_python_api_gives_the_ensemble_kedro_run_gave(
    project, concrete_run, tmp_path
):
    raw = pd.read_csv(project / "data" / "01_raw" / "concrete.csv")
    split = split_dataset(raw, "concrete", default_parameters()["data_processing"], 0)
    search = EnsembleSearch(
        method="segor",
        budget=12,
        cv=5,
        random_state=0,
        params={
            "ensemble": {"size": 4},
            "segor": {"optimizer": {"n_initial": 4, "gp_restarts": 1}},
        },
    ).fit(split.train_features, split.train_target)
    client = client_for(project)
    run_id = concrete_run.info.run_id
    saved = read_result(
        client.download_artifacts(run_id, "pools/segor_search_result", str(tmp_path))
    )
    assert search.result_.pool.configs == saved.pool.configs
    assert search.result_.members == saved.members
    model = verified_model(f"runs:/{run_id}/segor_model")
    np.testing.assert_allclose(
        search.predict(split.test_features), model.predict(split.test_features)
    )
