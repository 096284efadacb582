"""The task option max_crashes (poison jobs, issue 41): refused like max_attempts, before anything
is written, and stored on the job's row on every database."""

from __future__ import annotations

import pytest

from leased import ConfigurationError


@pytest.mark.parametrize("value", [0, -1, 2**31, 1.5, "2", True, None])
def test_max_crashes_out_of_range_is_refused_naming_the_field_and_the_fix(app, value):
    fix = r"use a whole number from 1 to 2,147,483,647 \(the crashes after which a job is failed as a poison job\)"
    with pytest.raises(ConfigurationError, match=fix):
        app.task(name="declared", max_crashes=value)(lambda: None)
    task = app.task(name="fine")(lambda: None)
    with pytest.raises(ConfigurationError, match=fix):
        task.using(max_crashes=value)
    assert app.counts() == {}, "nothing was written"


def test_max_crashes_is_stored_with_each_job(app):
    task = app.task(name="poisonable", max_crashes=3)(lambda: None)
    one = task.enqueue()
    many = task.using(max_crashes=1).enqueue_many([(), ()])
    default = app.task(name="plain")(lambda: None).enqueue()
    assert [(job.max_crashes, job.crashes) for job in (one, *many, default)] == [(3, 0), (1, 0), (1, 0), (2, 0)]
    stored = [app.get_job(job.id) for job in (one, *many, default)]
    assert [(job.max_crashes, job.crashes, job.quarantined) for job in stored] == [
        (3, 0, False), (1, 0, False), (1, 0, False), (2, 0, False)]
