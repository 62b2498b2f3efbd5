#!/usr/bin/env python
"""Mutation testing of the trust-critical modules, one module at a time (mutmut 2.x).

Usage (from the repository root)::

    python tools/mutation.py                      # every module in MODULES
    python tools/mutation.py merge pool           # just these
    python tools/mutation.py --list               # the modules, their scope and their tests
    python tools/mutation.py --report-only        # counts from the last run's cache, no mutating

Each module is mutated in a scratch copy of the checkout (``.mutation-scratch/``, ignored by git), so the
working tree is never left holding a mutant, even if the run is interrupted. Each mutant runs only the few
test files that cover its module (``pytest -x -q -p no:cacheprovider -n 0``: one process). A big module may be scoped to its
trust-critical functions: only lines inside them are mutated (in the scratch copy, every other line is marked
``# pragma: no mutate``, mutmut's own exclusion).

The report (stdout, and ``docs/mutation-report.md`` unless ``--no-write``) gives per module: mutants,
killed (mutmut's "suspicious", killed but slowly, included), survived, equivalent (a survivor listed in
docs/development.md's "Equivalent mutants" table), timeout, and the score: (killed + timeout) / (all - equivalent). Each survivor that is not listed as
equivalent is printed with its diff.
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import io
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".mutation-scratch"
EQUIVALENTS_DOC = ROOT / "docs" / "development.md"
REPORT = ROOT / "docs" / "mutation-report.md"
TARGET = 0.90
STEP_CAP_S = 300  # the longest a mutant's test step may run (a module's own tests take seconds to a minute)


@dataclass(frozen=True)
class Module:
    name: str
    path: str
    tests: tuple[str, ...]
    # The module's fast tests (files, or ``path::name`` node ids from `picked`: no fixture of conftest.py), run first
    # with --noconftest (a second faster); `tests` run only for a mutant these let live.
    fast: tuple[str, ...] = field(default_factory=tuple)
    # Qualified names (``function`` or ``Class.method``) whose lines alone are mutated; empty: the whole file.
    scope: tuple[str, ...] = field(default_factory=tuple)
    note: str = ""


def picked(path: str, names: str) -> tuple[str, ...]:
    """The node ids (``path::name``) of the named tests of one test file."""
    return tuple(f"{path}::{name}" for name in names.split())


# Each module's fast tests: tests that use no fixture of conftest.py, picked out of its feature test files (a name
# that is not a test function of its file fails `--list` and the run).
AGREEMENT = picked(
    "tests/test_agreement_intervals.py",
    """
    test_kappa_equals_scikit_learn_for_every_weighting
    test_kappa_refuses_what_it_cannot_compute_in_words_a_user_can_act_on
    test_alpha_equals_the_krippendorff_package_at_every_level test_alpha_of_a_single_unit_of_two_grades_is_defined
    test_alpha_refuses_an_unknown_level_and_is_undefined_without_pairs_or_spread test_the_table_reads_as_documented
    test_ordinal_alpha_counts_grades_nobody_gave_between_two_others_as_empty
    test_no_pairs_give_an_interval_undefined_everywhere_over_no_items
    test_kappa_interval_at_its_edges_is_the_brute_force_bootstrap
    test_alpha_interval_at_its_edges_is_the_brute_force_bootstrap
    test_units_graded_once_are_left_out_of_the_resampled_items test_the_alpha_interval_is_ordinal_unless_told
    test_an_unknown_level_of_the_interval_is_refused_naming_the_levels
    test_the_table_with_its_intervals_reads_as_written test_without_intervals_no_interval_is_printed
    test_a_kappa_interval_alone_still_explains_the_brackets test_a_pair_without_an_interval_shows_its_kappa_alone
    test_the_confusion_counts_are_printed_only_when_asked
    test_a_figure_on_fewer_than_fifty_pairs_is_flagged_and_fifty_is_not
    test_each_pair_that_shares_items_is_measured_after_one_that_shares_none
    test_the_share_of_same_grades_is_counted_by_hand test_alpha_is_ordinal_unless_told
    test_an_unknown_level_is_refused_listing_the_levels
    """,
)
BACKEND_IDENTITY = picked(
    "tests/test_identity_pins.py",
    """
    test_a_remembered_fingerprint_is_never_served_to_another_runtime_version
    test_a_package_that_decides_nothing_keeps_the_fingerprint test_backends_never_share_a_remembered_fingerprint
    test_the_onnx_runtime_identity test_the_openvino_runtime_identity
    test_the_int8_recipes_change_only_where_the_cpu_s_kernels_saturate
    test_the_cpu_kernel_class_keys_the_backends_whose_vectors_it_changes
    test_another_calibration_sample_is_another_model test_each_decisive_encoder_setting_is_another_model
    test_the_remembered_model_brings_its_dimension_and_device_and_loads_on_demand
    test_without_the_cache_or_a_fingerprint_nothing_is_remembered test_the_onnx_int8_recipe_is_the_measured_one
    test_a_remembered_model_loads_the_real_one_when_asked test_each_cpu_s_kernel_class_and_what_its_int8_kernels_do
    test_int8_speed_is_judged_on_every_x86_spelling_and_only_there
    """,
)
FINGERPRINTS = picked(
    "tests/test_data_fingerprints.py",
    """
    test_a_same_size_change_gives_a_new_fingerprint
    test_a_file_replaced_by_one_of_the_same_size_and_mtime_gives_a_new_fingerprint
    test_two_folders_of_same_sized_files_are_told_apart test_bench_sees_nothing_changed_on_the_same_data
    test_bench_names_each_data_file_changed_alone_at_the_same_size
    test_bench_names_a_run_file_changed_at_the_same_size
    test_a_result_without_a_run_fingerprint_is_not_stale_for_its_run
    test_a_folder_that_cannot_be_read_counts_as_changed test_every_file_changed_is_named
    test_the_data_tag_changes_with_each_fingerprint_and_nothing_else
    test_a_file_one_side_does_not_record_is_not_compared test_the_staleness_check_never_downloads
    test_the_data_tag_is_stable_across_versions
    """,
)
GRADE_SCALE = picked(
    "tests/test_convert_excel.py",
    """
    test_every_two_grades_make_a_scale_exactly_when_the_first_is_below_the_second
    test_a_text_that_is_not_two_grades_is_refused_by_both_callers
    """,
)
FUSION_LABEL = picked(
    "tests/test_labels.py",
    """
    test_fusions_that_can_differ_never_share_a_label test_the_default_settings_add_nothing_to_the_label
    test_each_non_default_setting_is_written_once test_a_weight_reads_back_exactly_from_its_label
    test_the_recorded_settings_are_those_the_method_uses
    test_fusions_that_can_differ_never_share_a_recorded_configuration
    """,
)
LABEL_RULES = picked(
    "tests/test_labels.py",
    """
    test_a_balanced_label_is_taken_as_written test_a_closer_without_its_opener_is_refused_naming_it
    test_an_opener_never_closed_is_refused_naming_it test_a_line_break_is_refused test_an_empty_label_is_refused
    test_a_model_is_shown_by_its_last_path_component_keeping_its_scheme
    test_a_fusion_named_after_a_member_model_shows_it_short
    test_an_older_fusion_takes_the_first_word_of_each_members_label_as_its_model
    test_a_member_name_that_begins_with_another_members_name_is_shortened_whole
    test_copies_of_one_configuration_show_the_newest_and_say_so
    test_two_configurations_found_twice_each_are_both_named_in_the_note
    test_results_without_a_hash_are_told_apart_by_their_file test_one_result_a_label_gets_no_hash_and_no_note
    test_different_configurations_under_one_label_get_their_hash_and_a_note_with_the_fix
    test_two_fusions_whose_short_labels_would_clash_keep_their_stored_labels
    """,
)
LLM = picked(
    "tests/test_llm_judge.py",
    """
    test_the_key_holds_each_input_by_value test_the_unchanged_inputs_are_served_from_the_cache
    test_a_grade_is_never_served_for_another_input test_each_input_keeps_its_own_grade
    test_the_prefix_is_not_part_of_the_model test_a_stored_value_off_the_scale_is_asked_again
    test_every_grade_on_the_scale_is_served test_without_the_cache_nothing_is_read test_a_grade_is_read
    test_an_answer_without_one_grade_on_the_scale_is_malformed
    test_the_prompt_fills_both_places_once_and_never_from_the_texts test_a_malformed_answer_says_what_it_held
    test_the_first_choice_s_content_and_the_usage_are_read test_an_answer_without_a_message_is_no_answer
    test_an_answer_that_is_not_json_shows_its_start_on_one_line test_the_annotator_is_the_model_without_its_prefix
    """,
)
METRICS = picked(
    "tests/test_metrics.py",
    """
    test_a_bad_metric_is_refused_with_a_spelling_that_works test_a_bad_cutoff_list_is_refused_naming_the_entry
    test_a_metric_table_naming_a_metric_twice_is_refused
    test_a_metric_table_giving_one_alias_to_two_metrics_is_refused
    test_the_shipped_table_is_read_once_and_its_records_cannot_change test_metric_specs_sort_by_name_then_cutoff
    test_an_evaluation_cannot_be_changed_after_it_is_made test_a_spec_of_no_known_metric_is_refused_before_scoring
    test_an_evaluation_counts_its_queries_by_hand test_metrics_each_cut_or_without_a_cutoff_read_no_whole_run_depth
    test_a_whole_run_metric_records_the_depth_it_read
    test_a_run_with_no_judged_query_reads_depth_zero_and_scores_zero
    test_judged_alone_is_scored_as_ir_measures_and_the_rest_as_pytrec_eval
    test_qrels_of_no_query_give_means_of_zero test_trec_eval_is_not_run_when_it_has_nothing_to_measure
    test_the_alias_table_is_built_once test_judged_ranks_documents_only_when_some_judgment_is_not_relevant
    test_a_query_whose_judgments_are_empty_is_judged_zero_like_ir_measures
    test_judged_ranks_nothing_when_every_cutoff_reaches_the_whole_ranking
    """,
)
POOL = picked(
    "tests/test_pool.py",
    """
    test_the_uncapped_pool_takes_each_systems_own_top_depth
    test_a_cap_keeps_the_best_ranked_documents_of_runs_of_any_length
    test_a_short_run_listed_first_does_not_shorten_the_others
    test_a_system_without_the_query_adds_nothing_and_breaks_nothing
    test_extra_pairs_sit_on_top_of_the_cap_unless_judged_or_pooled test_a_pool_spec_is_checked_at_its_bounds
    test_no_system_wins_every_tie_under_a_cap
    test_a_manifests_seed_reproduces_its_pool_and_the_default_is_the_manifests
    test_every_judged_extra_pair_is_counted_dropped
    """,
)
REGISTRY = picked(
    "tests/test_registry.py",
    """
    test_count_mismatch_compares_documents_and_queries test_on_another_split_only_the_documents_count
    test_unknown_names_and_forums_pass test_an_import_under_a_registry_name_checks_both_counts
    test_forums_are_summed test_a_folder_without_the_eval_split_is_refused
    test_the_mismatch_says_both_sides_word_for_word test_the_import_refusals_word_for_word
    test_a_gzipped_corpus_is_counted_by_its_lines
    """,
)
SCORE = picked(
    "tests/test_score.py",
    """
    test_the_hand_counts_are_all_different test_the_header_counts_each_file
    test_judged_only_counts_the_judged_queries_with_results test_the_json_counts_and_means
    test_the_printed_means_and_per_query_values test_the_json_document_names_both_files_and_what_was_counted
    test_each_format_is_named_with_its_counts test_the_default_metrics_and_a_bad_one
    test_without_metrics_the_defaults_are_printed_in_order
    test_a_metric_spelled_twice_or_another_way_is_scored_once_in_its_canonical_name
    test_the_json_keeps_non_ascii_ids_readable_and_is_indented_by_two
    """,
)
SEARCH_CUT = picked(
    "tests/test_index.py",
    """
    test_a_corpus_exactly_as_deep_as_the_cut_is_returned_whole test_well_separated_scores_need_one_search
    test_a_search_that_already_holds_the_whole_corpus_is_not_repeated
    test_a_top_document_faiss_ranks_just_below_the_cut_is_rescored_in
    test_all_zero_scores_keep_the_greatest_doc_ids_from_the_whole_corpus
    test_ties_that_end_inside_the_first_deeper_search_need_exactly_one_more
    """,
)
SHARDED = picked(
    "tests/test_ray_search.py",
    """
    test_merged_shards_are_the_top_of_every_row test_shards_cover_every_chunk_once_in_order
    test_shards_share_the_rows_about_evenly test_query_blocks_cover_the_queries_with_the_remainder_in_the_last
    test_empty_chunks_never_make_more_shards_than_asked
    """,
)
STREAMED = picked(
    "tests/test_streamed.py",
    """
    test_the_ties_do_need_a_deeper_pass_that_the_first_budget_cannot_hold
    test_a_strict_budget_that_fits_the_first_pass_carries_the_deeper_passes
    test_a_strict_budget_below_the_first_pass_is_refused
    test_a_default_budget_below_the_minimum_searches_in_the_smallest_blocks test_each_search_plans_afresh
    test_the_minimum_is_the_fixed_part_and_the_smallest_block
    test_the_block_is_what_the_budget_holds_beyond_the_fixed_part
    test_fewer_queries_than_the_smallest_block_are_one_block
    test_a_big_chunk_counts_only_faiss_s_1024_document_tile test_the_refusals_read_as_written
    test_no_queries_count_as_a_block_of_one test_a_fixed_query_block_plans_nothing
    test_the_plan_and_a_fallback_are_logged_as_written test_a_budget_is_the_caller_s_unless_told_otherwise
    """,
)

MERGE = picked(
    "tests/test_judgments.py",
    """
    test_majority_takes_the_lowest_of_the_tied_grades test_mean_rounds_to_the_nearest_and_a_half_by_the_tie_rule
    test_majority_ties_go_to_the_tie_rule test_max_is_the_highest test_named_ties_and_halves
    test_a_merge_with_ties_resolves_each_pair_by_its_policy test_strict_refuses_a_tie_and_writes_nothing
    test_strict_takes_agreeing_grades test_an_existing_grade_tied_by_a_new_one_is_a_vote
    test_a_dry_merge_writes_nothing test_a_scale_is_read test_a_bad_scale_is_refused
    test_one_annotator_grading_a_pair_two_ways_is_refused_naming_both_places
    test_grades_off_the_scale_are_refused_each_named test_the_scale_bounds_are_inclusive
    test_a_bad_scale_says_what_it_wants test_a_split_on_another_scale_is_refused_naming_it
    test_a_split_holding_grades_off_the_scale_is_refused_naming_them
    test_strict_lists_each_conflict_with_every_vote test_an_unknown_policy_is_refused
    test_a_rerun_of_the_same_merge_changes_nothing test_a_later_merge_adds_its_votes_to_the_recorded_ones
    """,
)
MERGE_RULES = picked(
    "tests/test_merge_provenance.py",
    """
    test_a_split_whose_qrels_file_holds_only_its_header_takes_a_merge
    test_the_provenance_left_beside_a_deleted_qrels_file_still_names_its_scale
    test_a_provenance_without_a_scale_is_read_as_naming_none
    test_every_hand_edit_after_the_last_merges_own_resolution_is_a_vote
    test_the_recorded_policy_and_tie_rule_recognise_the_last_merges_own_resolution
    test_a_recorded_tie_rule_that_is_no_tie_rule_falls_back_to_reading_hand_kept_grades_as_votes
    test_an_unknown_tie_rule_is_refused_listing_the_rules test_a_written_merge_says_so_and_a_dry_one_does_not
    test_the_agreement_is_measured_over_exactly_the_scales_grades
    test_a_folder_as_a_source_of_votes_gives_its_recorded_annotations
    test_a_folder_with_no_annotations_is_refused_naming_the_file_and_the_fix
    test_the_mean_of_five_or_six_grades_rounds_to_the_nearest
    test_votes_read_for_agreement_default_to_the_0_3_scale
    """,
)

MODULES: dict[str, Module] = {
    m.name: m
    for m in [
        Module(
            "llm",
            "harness/judging/llm.py",
            (),
            fast=LLM,
            scope=(
                "SCALE",
                "_FINAL_SCORE",
                "_BARE",
                "_PLACEHOLDER",
                "JudgePrompt.sha256",
                "JudgePrompt.render",
                "parse_grade",
                "answer_content",
                "cache_inputs",
                "cached_grades",
                "JudgeSpec.service_model",
                "JudgeSpec.annotator",
            ),
            note="the judge's cache key and its answer parser",
        ),
        Module(
            "merge",
            "harness/judging/merge.py",
            ("tests/test_judgments.py", "tests/test_merge_provenance.py"),
            fast=(*MERGE, *MERGE_RULES),
            scope=(
                "parse_scale",
                "_check_same_annotator",
                "_check_scale",
                "resolve",
                "_existing",
                "_qrels_votes",
                "judgment_votes",
                "merge_judgments",
            ),
            note="the grade each pair gets (reading files and writing them are covered elsewhere)",
        ),
        Module(
            "grade-scale",
            "harness/datasets/convert/grades.py",
            ("tests/test_convert_excel.py",),
            fast=(*GRADE_SCALE, *MERGE),
            scope=("SCALE", "scale_bounds", "parse_grade_scale"),
            note="the one LOW-HIGH grade-scale reader, convert's and the merge's (merge's parse_scale names it)",
        ),
        Module(
            "agreement",
            "harness/judging/agreement.py",
            ("tests/test_judgments.py", "tests/test_agreement_intervals.py"),
            fast=AGREEMENT,
        ),
        Module(
            "pool",
            "harness/judging/pool.py",
            ("tests/test_pool.py",),
            fast=POOL,
            scope=("check_spec", "pool_runs"),
            note="the pool itself (the folder writing around it is not trust-critical)",
        ),
        Module(
            "fusion-label",
            "harness/retrieval/fusion.py",
            ("tests/test_labels.py",),
            fast=FUSION_LABEL,
            scope=("_number", "FusionSpec.label", "FusionSpec.to_config"),
            note="a fused result's label and recorded settings",
        ),
        Module(
            "labels",
            "harness/reporting/labels.py",
            ("tests/test_labels.py",),
            fast=LABEL_RULES,
        ),
        Module(
            "scoring",
            "harness/cli/scoring.py",
            ("tests/test_score.py",),
            fast=SCORE,
            scope=("metrics_callback", "score", "_counted", "_depth_note"),
            note="what `score` prints (its options' help texts are not mutated)",
        ),
        Module(
            "registry",
            "harness/datasets/registry.py",
            ("tests/test_registry.py",),
            fast=REGISTRY,
            scope=("count_mismatch",),
            note="a folder evaluated under a registry name",
        ),
        Module(
            "import-check",
            "harness/datasets/catalog.py",
            ("tests/test_data_fingerprints.py",),
            fast=REGISTRY,
            scope=("_count_lines", "_check_counts"),
            note="a folder imported or installed under a registry name",
        ),
        Module(
            "fingerprints",
            "harness/reporting/report.py",
            ("tests/test_data_fingerprints.py",),
            fast=FINGERPRINTS,
            scope=("DATA_FILES", "data_changes", "data_tag", "folder_fingerprints", "_file_sha256"),
            note="data fingerprints and their memo",
        ),
        Module(
            "bench",
            "harness/pipeline/bench.py",
            ("tests/test_data_fingerprints.py",),
            fast=FINGERPRINTS,
            scope=("_changed_data",),
            note="bench's staleness rule",
        ),
        Module(
            "streamed",
            "harness/retrieval/streamed.py",
            (),
            fast=STREAMED,
            scope=("plan_search", "StreamedIndex._search"),
            note="the streamed search's budget and its deeper passes",
        ),
        Module(
            "sharded",
            "harness/engines/ray_search.py",
            (),
            fast=SHARDED,
            scope=("plan_shards", "query_blocks"),
            note="how chunks become shards and queries blocks",
        ),
        Module(
            "search-cut",
            "harness/retrieval/index/exact.py",
            (),
            fast=(*SEARCH_CUT, *SHARDED, *STREAMED, "tests/test_scan_work.py"),
            scope=("exact_top", "rescore_groups", "merge_top", "_ranked"),
            note="the exact top and the tie rule at the cut, shared by the streamed and the sharded search",
        ),
        Module(
            "scan",
            "harness/retrieval/index/exact.py",
            ("tests/test_streamed.py",),
            fast=("tests/test_scan_work.py",),
            scope=("TopScan.add", "TopScan._merge", "TopScan._admit", "TopScan.result", "scan_top"),
            note="the exact scan both flat searches run: each query's running cut, tile by tile, and its work counts",
        ),
        Module(
            "dense-identity",
            "harness/pipeline/dense/stage.py",
            (),
            fast=BACKEND_IDENTITY,
            scope=("_model_or_lazy",),
            note="the remembered model fingerprint's key (settings, CPU class, runtime versions)",
        ),
        Module(
            "kernel-class",
            "harness/host.py",
            (),
            fast=BACKEND_IDENTITY,
            scope=("kernel_class", "int8_fast_here", "SATURATING_INT8", "int8_saturates"),
            note="the CPU's kernel class, which keys int8 vectors and picks the int8 recipe",
        ),
        Module(
            "onnx-identity",
            "harness/runtimes/onnx_backend.py",
            (),
            fast=BACKEND_IDENTITY,
            scope=("QUANTIZATION", "SATURATING", "quantization", "runtime_identity"),
        ),
        Module(
            "openvino-identity",
            "harness/runtimes/openvino_backend.py",
            (),
            fast=BACKEND_IDENTITY,
            scope=("SATURATING", "quantization", "runtime_identity"),
        ),
        Module(
            "auto-choice",
            "harness/runtimes/auto.py",
            ("tests/test_auto_backend.py",),
            fast=("tests/test_auto_observed.py", "tests/test_runtimes.py"),
            scope=("native_bf16", "installed_candidates", "observe_pick"),
            note="--backend auto's candidates (installed, natively computed) and its pick held to the pace it keeps",
        ),
        Module(
            "metrics",
            "harness/evaluation/metrics.py",
            ("tests/test_metrics.py", "tests/test_score.py"),
            fast=METRICS,
        ),
    ]
}


def check_picked(module: Module) -> None:
    """Fail on a fast test that is not a test function of its file: pytest would refuse the node id and every
    mutant would read as killed."""
    for node in module.fast:
        path, _, name = node.partition("::")
        if not name:
            continue
        tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
        if name not in {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}:
            raise SystemExit(f"{path}: no test {name} ({module.name}'s fast tests in tools/mutation.py)")


def shown(tests: tuple[str, ...]) -> str:
    """Test files, and picked tests as ``path::[N tests]``."""
    files: dict[str, int] = {}
    for node in tests:
        path, _, name = node.partition("::")
        files[path] = files.get(path, 0) + bool(name)
    return " ".join(f"{path}::[{n} tests]" if n else path for path, n in files.items())


def scope_lines(path: Path, qualnames: tuple[str, ...]) -> set[int]:
    """The line numbers inside the named functions (``f`` or ``Class.f``, from the ``def`` line) and
    module-level constants (``NAME = ...``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    wanted, found = set(qualnames), set()
    lines: set[int] = set()

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if name in wanted and not isinstance(child, ast.ClassDef):
                    # from the def line: a decorator (a click option's help text) is not the function's logic
                    lines.update(range(child.lineno, child.end_lineno + 1))
                    found.add(name)
                visit(child, f"{name}.")
            elif isinstance(child, (ast.Assign, ast.AnnAssign)) and not prefix:  # a module-level constant
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in wanted:
                        lines.update(range(child.lineno, child.end_lineno + 1))
                        found.add(target.id)

    visit(tree, "")
    missing = wanted - found
    if missing:
        raise SystemExit(f"{path}: no function {', '.join(sorted(missing))} (MODULES in tools/mutation.py)")
    return lines


PRAGMA = "# pragma: no mutate"


def fence_scope(module: Module, where: Path) -> None:
    """Mark every line of the scratch copy of a scoped module outside its scope ``# pragma: no mutate`` (mutmut's
    own exclusion), where a comment can go: the end of a line of code, never inside a string."""
    path = where / module.path
    source = path.read_text(encoding="utf-8")
    inside = scope_lines(path, module.scope)
    ends = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.NEWLINE, tokenize.NL) and token.start[1] > 0:
            ends.add(token.start[0])
        elif token.type == tokenize.COMMENT:
            ends.add(token.start[0])
    lines = source.split("\n")
    for number in ends - inside:
        lines[number - 1] += ("  " if "#" not in lines[number - 1] else " ") + PRAGMA
    path.write_text("\n".join(lines), encoding="utf-8")


def make_scratch() -> Path:
    """A fresh copy of the tracked and untracked-but-not-ignored files (git's own view of the tree)."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    caches = SCRATCH / "caches"
    kept = {p.name: p.read_bytes() for p in caches.glob("*.sqlite")} if caches.is_dir() else {}
    if SCRATCH.exists():
        shutil.rmtree(SCRATCH)
    for name in filter(None, files):
        src = ROOT / name
        if not src.is_file() or name.startswith(".mutation-scratch"):
            continue
        dst = SCRATCH / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    caches.mkdir(parents=True)
    for name, data in kept.items():  # each module's last results, for the report
        (caches / name).write_bytes(data)
    return SCRATCH


def cache_of(module: Module, where: Path) -> Path:
    """Where a module's mutmut results are kept: one fresh cache per module and run (mutmut 2.5.1 crashes,
    "Attribute Mutant.line is required", reusing a cache whose lines it renumbered)."""
    return where / "caches" / f"{module.name}.sqlite"


def run_module(module: Module, where: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(where), PYTHONDONTWRITEBYTECODE="1")
    # mutmut's timeout kills the runner (bash), not the pytest inside it, which a mutant that loops forever would keep
    # busy on a core: each step has its own cap (`timeout`: its 124 is a failure, so such a mutant reads as killed)
    pytest = f"timeout -k 5 {STEP_CAP_S} {sys.executable} -m pytest -x -q -p no:cacheprovider -n 0"
    fast = " ".join(t for t in module.fast if (where / t.split("::")[0]).exists())
    tests = " ".join(t for t in module.tests if (where / t).exists())
    steps = ([f"{pytest} --noconftest {fast}"] if fast else []) + ([f"{pytest} {tests}"] if tests else [])
    # mutmut 2.5.1 counts only exit status 1 as "tests failed": pytest's 2 (a collection error, as a mutant that is
    # a SyntaxError gives) would read as survived, so any failure is made 1
    runner = f"bash -c '( {' && '.join(steps)} ) || exit 1'"
    command = [
        "mutmut",
        "run",
        "--paths-to-mutate",
        module.path,
        "--tests-dir",
        "tests",
        "--runner",
        runner,
        "--no-progress",
        "--simple-output",
    ]
    original = (where / module.path).read_text(encoding="utf-8")
    if module.scope:
        fence_scope(module, where)
    print(
        f"== {module.name}: {module.path}" + (f" (scoped: {', '.join(module.scope)})" if module.scope else ""),
        flush=True,
    )
    print("   " + runner, flush=True)
    (where / ".mutmut-cache").unlink(missing_ok=True)
    # its own process group: an interrupted run takes mutmut's workers and their pytest with it
    process = subprocess.Popen(command, cwd=where, env=env, start_new_session=True)
    try:
        return process.wait()
    except BaseException:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait()
        raise
    finally:
        # unfenced again: a second module scoped in the same file fences it afresh
        (where / module.path).write_text(original, encoding="utf-8")
        if (where / ".mutmut-cache").exists():
            shutil.move(where / ".mutmut-cache", cache_of(module, where))


def mutants_of(db: Path, path: str) -> list[tuple[int, int, str, str]]:
    """(id, line number, source line, status) of each mutant mutmut's cache `db` holds for `path`."""
    if not db.exists():
        return []
    with sqlite3.connect(db) as con:
        return con.execute(
            "SELECT m.id, l.line_number, l.line, m.status FROM Mutant m JOIN Line l ON m.line = l.id "
            'JOIN SourceFile s ON l.sourcefile = s.id WHERE s.filename = ? ORDER BY l.line_number, m."index"',
            (path,),
        ).fetchall()


def mutant_diff(where: Path, mutant_id: int) -> tuple[str, str]:
    """The mutated line before and after (stripped), from ``mutmut show``."""
    shown = subprocess.run(["mutmut", "show", str(mutant_id)], cwd=where, capture_output=True, text=True).stdout
    shown = shown.replace("  " + PRAGMA, "").replace(" " + PRAGMA, "")
    before = [line[1:].strip() for line in shown.splitlines() if line.startswith("-") and not line.startswith("---")]
    after = [line[1:].strip() for line in shown.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return " / ".join(before), " / ".join(after)


def _cells(row: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", row.strip().strip("|"))
    return [c.strip().replace("\\|", "|").strip("`").strip() for c in cells]


def read_equivalents() -> dict[tuple[str, str, str], str]:
    """(module path, original line, mutated line) → reason, from the table under "### Equivalent mutants"."""
    text = EQUIVALENTS_DOC.read_text(encoding="utf-8")
    section = text.split("### Equivalent mutants", 1)
    if len(section) < 2:
        return {}
    found = {}
    for row in section[1].split("\n#", 1)[0].splitlines():
        if not row.startswith("|") or set(row) <= set("|-: "):
            continue
        cells = _cells(row)
        if len(cells) >= 4 and cells[0].startswith("harness/"):
            found[cells[0], cells[1], cells[2]] = cells[3]
    return found


def tally(module: Module, where: Path, equivalents) -> tuple[dict[str, int], list[str]]:
    counts = dict(mutants=0, killed=0, survived=0, equivalent=0, timeout=0, suspicious=0, untested=0)
    lost = []
    db = cache_of(module, where)
    show = where / "show" / module.name  # `mutmut show` reads ./.mutmut-cache and the fenced source: its own copy
    if db.exists():  # (never the scratch copy's own cache, which a run may be writing)
        shutil.rmtree(show, ignore_errors=True)
        (show / module.path).parent.mkdir(parents=True)
        shutil.copy(db, show / ".mutmut-cache")
        if (ROOT / module.path).exists():
            shutil.copy(ROOT / module.path, show / module.path)
            if module.scope:
                fence_scope(module, show)
    inside = scope_lines(ROOT / module.path, module.scope) if module.scope else None
    for mutant_id, number, _line, status in mutants_of(db, module.path):
        if inside is not None and number + 1 not in inside:  # a line continued by a backslash takes no pragma
            continue
        counts["mutants"] += 1
        if status == "ok_killed":
            counts["killed"] += 1
        elif status == "bad_timeout":
            counts["timeout"] += 1
        elif status == "ok_suspicious":  # killed, but slower than mutmut expected
            counts["killed"] += 1
            counts["suspicious"] += 1
        elif status == "bad_survived":
            before, after = mutant_diff(show, mutant_id)
            if (module.path, before, after) in equivalents:
                counts["equivalent"] += 1
            else:
                counts["survived"] += 1
                lost.append(f"   survived #{mutant_id} line {number + 1}: {before!r} -> {after!r}")
        else:
            counts["untested"] += 1
    return counts, lost


def score(counts: dict[str, int]) -> float | None:
    live = counts["mutants"] - counts["equivalent"] - counts["untested"]
    # a timeout is a mutant the tests stopped (an endless loop): killed, as mutmut's own summary counts it
    return (counts["killed"] + counts["timeout"]) / live if live else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"some of: {', '.join(MODULES)} (default: all)")
    parser.add_argument("--list", action="store_true", help="print the modules, their scope and tests")
    parser.add_argument("--report-only", action="store_true", help="tally the last run's cache, mutate nothing")
    parser.add_argument("--no-write", action="store_true", help=f"do not rewrite {REPORT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; known: {', '.join(MODULES)}")
    chosen = [MODULES[m] for m in (args.modules or MODULES)]
    for m in chosen:
        check_picked(m)
    if args.list:
        for m in chosen:
            if m.scope:
                scope_lines(ROOT / m.path, m.scope)  # a scope naming a function that moved away fails here
            print(
                f"{m.name:12} {m.path}  scope: {', '.join(m.scope) or 'whole file'}\n{'':12} tests: "
                f"{shown(m.fast + m.tests)}"
            )
        return 0
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # kill PID stops mutmut's process group too
    where = SCRATCH if args.report_only else make_scratch()
    if not args.report_only:
        for module in chosen:
            run_module(module, where)
    equivalents = read_equivalents()
    rows, failed = [], False
    for module in MODULES.values():  # the report covers every module the cache has results for
        counts, lost = tally(module, where, equivalents)
        if not counts["mutants"]:
            continue
        s = score(counts)
        failed |= s is not None and s < TARGET
        rows.append((module, counts, s))
        print(f"{module.name:10} {counts}  score {'-' if s is None else f'{s:.1%}'}")
        print("\n".join(lost))
    if not args.no_write and rows:
        write_report(rows)
    return 1 if failed else 0


def write_report(rows) -> None:
    old = REPORT.read_text(encoding="utf-8") if REPORT.exists() else ""
    previous = {}
    for line in old.splitlines():  # keep the rows of modules this run did not tally
        cells = _cells(line) if line.startswith("| ") else []
        if len(cells) >= 11 and cells[1].startswith("harness/"):
            previous[cells[0]] = line
    today = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")
    for module, counts, s in rows:
        scope = ", ".join(f"`{q}`" for q in module.scope) or "whole file"
        previous[module.name] = (
            f"| {module.name} | `{module.path}` | {scope} | {counts['mutants']} | {counts['killed']} | "
            f"{counts['survived']} | {counts['equivalent']} | {counts['timeout']} | {counts['untested']} | "
            f"{'-' if s is None else f'{s:.1%}'} | {today} |"
        )
    head = [
        "# Mutation report",
        "",
        "The last measured run of `python tools/mutation.py` (mutmut 2.5.1), one module at a time, each mutant "
        "tested by the module's own few test files (`python tools/mutation.py --list`). Score: killed (and timed "
        "out) / (mutants - equivalent). Equivalent mutants, each with its reason, are listed in "
        "[Development](development.md#equivalent-mutants). Re-run a module whenever it changes: "
        "`python tools/mutation.py MODULE`.",
        "",
        "Command: `python tools/mutation.py [MODULE ...]`, then `python tools/mutation.py --report-only` (this "
        "table). Not tested: mutants the run did not reach (it was stopped); the score counts only tested ones.",
        "",
        "| module | file | mutated | mutants | killed | survived | equivalent | timeout | not tested | score "
        "| measured |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    order = list(MODULES)
    body = [previous[name] for name in sorted(previous, key=lambda n: order.index(n) if n in order else 99)]
    notes = old[old.index("\n## Notes") :] if "\n## Notes" in old else ""  # kept as written by hand
    REPORT.write_text("\n".join(head + body) + "\n" + notes, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
