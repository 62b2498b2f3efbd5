"""Building an eval set: pools to judge, merging the judgments made, their agreement and coverage."""
