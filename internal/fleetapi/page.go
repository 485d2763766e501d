package fleetapi

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
)

// PageSize is how many entities a page holds (fleetd's default token_limit).
const PageSize = 100

// pageToken is fleet's nextPageToken: the page size and the 1-based page
// number as two little-endian uint16, in URL-safe base64.
type pageToken struct {
	limit, page uint16
}

func (t pageToken) String() string {
	var b [4]byte
	binary.LittleEndian.PutUint16(b[0:], t.limit)
	binary.LittleEndian.PutUint16(b[2:], t.page)
	return base64.URLEncoding.EncodeToString(b[:])
}

// readPageToken returns the page a request asks for: the first without a
// nextPageToken.
func readPageToken(q url.Values, limit uint16) (pageToken, error) {
	vs := q["nextPageToken"]
	switch len(vs) {
	case 0:
		return pageToken{limit: limit, page: 1}, nil
	case 1:
	default:
		return pageToken{}, errors.New("too many values for page token")
	}
	b, err := base64.URLEncoding.DecodeString(vs[0])
	if err != nil || len(b) != 4 {
		return pageToken{}, fmt.Errorf("invalid value of nextPageToken query parameter %q", vs[0])
	}
	t := pageToken{limit: binary.LittleEndian.Uint16(b[0:]), page: binary.LittleEndian.Uint16(b[2:])}
	if t.limit != limit {
		return pageToken{}, fmt.Errorf("token limit must be %d", limit)
	}
	if t.page == 0 {
		return pageToken{}, errors.New("token page must be greater than zero")
	}
	return t, nil
}

// pageOf returns the range [from, to) of n entities that page t holds, and
// the token of the next page, "" when this page is the last.
func pageOf(n int, t pageToken) (from, to int, next string) {
	from = int(t.page-1) * int(t.limit)
	to = int(t.page) * int(t.limit)
	if from >= n {
		return 0, 0, ""
	}
	if to >= n {
		return from, n, ""
	}
	return from, to, pageToken{limit: t.limit, page: t.page + 1}.String()
}
