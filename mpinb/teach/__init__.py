"""The tutorials' graded exercises: ``mpinb.check(name)`` grades the last run of one."""

from ._exercises import EXERCISES, Exercise
from ._grading import CheckResult, check

__all__ = ["EXERCISES", "CheckResult", "Exercise", "check"]
