/*
 * frameq 0.6.0 -> 0.7.0.
 *
 * Built by the Makefile from the files in sql/0.7.0/, in name order; edit
 * those, not the built sql/frameq--0.6.0--0.7.0.sql.  Every function this
 * step creates or replaces names its search_path and privileges itself
 * (CREATE OR REPLACE forgets SET clauses and SECURITY DEFINER).
 */

\echo Use "ALTER EXTENSION frameq UPDATE TO '0.7.0'" to load this file. \quit
