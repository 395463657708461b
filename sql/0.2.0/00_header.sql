/*
 * frameq 0.1.0 -> 0.2.0: the trust boundary.
 *
 * This script is built by the Makefile from the files in sql/0.2.0/, in
 * name order; edit those, not the built sql/frameq--0.1.0--0.2.0.sql.  A
 * fresh CREATE EXTENSION runs frameq--0.1.0.sql and then this step, so a
 * new database and an upgraded one have the same schema by construction.
 */

\echo Use "ALTER EXTENSION frameq UPDATE TO '0.2.0'" to load this file. \quit
