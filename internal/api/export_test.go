package api

// For TestRequestSeeds (package api_test): the fuzz seeds and the reading
// of requests, to compare with the real handler's answers.

type RequestSeed = requestSeed

func RequestSeeds() []RequestSeed { return requestSeeds() }

func (s RequestSeed) Request() (method, path, body string) {
	switch s.kind % kinds {
	case kindPutUnit:
		return "PUT", "/v1/units/" + s.name, s.body
	case kindBatch:
		return "POST", "/v1/batch", s.body
	case kindPatchMachine:
		return "PATCH", "/v1/machines/" + s.name, s.body
	default:
		return "PUT", "/v1/scheduler", s.body
	}
}

func (s RequestSeed) Read() (code int, answer []byte) {
	code, answer, _ = readRequest(s.kind, s.name, []byte(s.body))
	return code, answer
}
