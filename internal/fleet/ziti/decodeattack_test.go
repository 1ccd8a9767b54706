package ziti

import (
	"io"
	"strings"
	"testing"

	"github.com/go-openapi/runtime"
	"github.com/openziti/edge-api/rest_model"
)

type repeatByte struct {
	b    byte
	left int64
}

func (r *repeatByte) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	for i := range p {
		p[i] = r.b
	}
	r.left -= int64(len(p))
	return len(p), nil
}

// A listing page beyond maxListing (a controller's or a proxy's fault: 500 identities are a few
// hundred KiB) is refused as too large, not read into memory whole.
func TestListConsumerRefusesAPageBeyondTheCap(t *testing.T) {
	body := io.MultiReader(strings.NewReader(`{"data":[{"id":"a","name":"monky-host.x","x":"`),
		&repeatByte{b: 'a', left: maxListing}, strings.NewReader(`"}],"meta":{"pagination":{"totalCount":1,"limit":500,"offset":0}}}`))
	var env rest_model.ListIdentitiesEnvelope
	err := listConsumer(runtime.JSONConsumer()).Consume(body, &env)
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("a page of more than %d bytes: %v", maxListing, err)
	}
}
