"""Every problem of a conversion reported in one run: the rows' problems collected (the first `PROBLEM_LIMIT`,
then a count), and several problems raised as one error, one line each."""

from __future__ import annotations

from harness.errors import FormatError, HarnessError

SHOWN = 5  # how many offending lines an error lists before "and N more"
PROBLEM_LIMIT = 20  # how many row problems one run lists before "and N more"


class ColumnProblems(FormatError):
    """Several tables (or several columns of one) cannot be read; each problem on its own line."""

    what = "with the input tables"

    def __init__(self, problems: list[FormatError], count: int | None = None):
        self.problems = problems
        self.count = len(problems) if count is None else count
        more = f"\n  and {self.count - len(problems)} more" if self.count > len(problems) else ""
        HarnessError.__init__(
            self,
            f"{self.count} problems {self.what} (nothing written):\n  "
            + "\n  ".join(str(problem) for problem in problems)
            + more,
        )
        self.path, self.reason, self.line_no, self.hint, self.unit = problems[0].path, str(self), None, None, "line"


class RowProblems(ColumnProblems):
    """Several rows of the input tables cannot be converted; the first `PROBLEM_LIMIT`, then a count."""

    what = "in the input rows"


class Problems:
    """The row problems of one conversion: the first `PROBLEM_LIMIT` kept, the rest counted."""

    def __init__(self, limit: int = PROBLEM_LIMIT):
        self.limit = limit
        self.shown: list[FormatError] = []
        self.count = 0

    def add(self, problem: FormatError) -> None:
        self.count += 1
        if len(self.shown) < self.limit:
            self.shown.append(problem)

    def raise_any(self) -> None:
        """Raises: FormatError: The one problem found. RowProblems: Several, one line each."""
        if self.count == 1:
            raise self.shown[0]
        if self.count:
            raise RowProblems(self.shown, self.count)
