"""Tasks reach their process's services through their base class, built once by ``build``."""

from celery.signals import worker_process_init

from theow_workers import tasks
from theow_workers.replay import tasks as replay_tasks
from theow_workers.runtime import build
from theow_workers.worker import ServicesTask


def test_every_task_of_a_process_shares_one_set_of_services_built_for_a_worker():
    services = tasks.resolve.services
    assert services.role == "worker"
    others = (tasks.explore, tasks.passing, tasks.client_outcome, replay_tasks.replay)
    assert all(task.services is services for task in others)
    assert all(isinstance(task, ServicesTask) for task in (tasks.resolve, *others))


def test_a_forked_pool_process_forgets_the_parents_services_and_builds_its_own():
    parent = tasks.resolve.services
    worker_process_init.send(sender=None)
    child = tasks.resolve.services
    assert child is not parent
    assert tasks.explore.services is child


def test_the_console_and_the_cli_build_their_services_with_the_same_function():
    from theow_workers.config import Settings

    settings = Settings.load(env={})
    assert build(settings, "web").role == "web"
    assert build(settings, "cli").settings is settings
