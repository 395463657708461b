/*
 * The metrics' totals (tally, 0.6.0) go into pg_dump's output with the
 * rest of the farm: 0.6.0 left them out, so a farm restored from a dump
 * counted its pruned runs, frames and jobs and its expired leases from
 * zero again, and the metrics' counters went backwards.
 */
SELECT pg_catalog.pg_extension_config_dump('frameq.tally', '');
