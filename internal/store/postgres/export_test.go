package postgres

// UseAPIKeySQL is UseAPIKey's statement, for the test that reads its plan.
const UseAPIKeySQL = useAPIKeySQL
