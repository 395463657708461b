/* metrics and prune(): the same grants as sql/src/grants.sql makes on a fresh install */
GRANT SELECT ON frameq.metrics TO frameq_reader;
GRANT EXECUTE ON FUNCTION frameq.prune(interval) TO frameq_admin;
