"""Judging runs and reports: the ground truth, the detectors' diagnosis tables, predictions checked
against measured fixes, verdicts, nsys's expert rules and the corpus scores."""
