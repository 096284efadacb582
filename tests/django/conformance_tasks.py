"""The tasks Django's own tests use to pin its backends' behaviour (tests/tasks/tasks.py in Django)."""

from django.tasks import TaskContext, task


@task()
def noop_task(*args: tuple, **kwargs: dict) -> None:
    return None


@task()
async def noop_task_async(*args: tuple, **kwargs: dict) -> None:
    return None


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
def failing_task_value_error() -> None:
    raise ValueError("This Task failed due to ValueError")


@task()
def failing_task_system_exit() -> None:
    raise SystemExit("This Task failed due to SystemExit")


@task()
def failing_task_keyboard_interrupt() -> None:
    raise KeyboardInterrupt("This Task failed due to KeyboardInterrupt")


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value():
    return {"value": object()}  # not JSON


@task(takes_context=True)
def get_task_id(context) -> str:
    return context.task_result.id


@task(takes_context=True)
def check_context(context, attempt) -> None:
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt


@task()
def record(path: str, label: str) -> None:
    with open(path, "a") as file:
        file.write(label + "\n")
