/* complete_many(): the same grant as sql/src/grants.sql makes on a fresh install */
GRANT EXECUTE ON FUNCTION
	frameq.complete_many(text, text, bigint, bigint[], int[], int[], bigint[], bool[])
	TO frameq_agent;
