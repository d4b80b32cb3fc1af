package gateway

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/partitionpb"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

type devRules struct{}

func (devRules) Ruleset() *sas.Ruleset { return sas.DevRuleset() }

// consoleGateway is a gateway whose catalog nobody may call: the requests
// these tests make are answered before any would be.
func consoleGateway(t testing.TB) *Gateway {
	t.Helper()
	g, err := New(Config{Catalog: placementpb.NewPlacementServiceClient(nil), Stats: noStats{}, Validator: RulesValidator{Rules: devRules{}}})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

type noStats struct{}

func (noStats) Stats(ctx context.Context, e *placementpb.Entity, p uint32) (*partitionpb.StatsResponse, error) {
	panic("not called")
}

func (noStats) GroupStats(ctx context.Context, group uint64, refs []*partitionpb.EntityPartitionRef) ([]*partitionpb.EntityPartitionStats, error) {
	panic("not called")
}

func TestConsoleSignInAndFiles(t *testing.T) {
	g := consoleGateway(t)
	do := func(method, path, body string, header map[string]string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://gw.test"+path, strings.NewReader(body))
		for k, v := range header {
			r.Header.Set(k, v)
		}
		for _, c := range cookies {
			r.AddCookie(c)
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w
	}
	console := map[string]string{"X-Quorumbus-Console": "1"}

	for _, f := range []struct{ path, ctype string }{
		{"/$console/", "text/html"}, {"/$console/app.js", "text/javascript"}, {"/$console/style.css", "text/css"},
	} {
		w := do(http.MethodGet, f.path, "", nil)
		if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), f.ctype) || w.Header().Get("Content-Security-Policy") == "" {
			t.Errorf("GET %s: %d %q, CSP %q", f.path, w.Code, w.Header().Get("Content-Type"), w.Header().Get("Content-Security-Policy"))
		}
	}
	if w := do(http.MethodGet, "/$console/../gateway.go", "", nil); w.Code != http.StatusNotFound {
		t.Errorf("a path out of the console's files: %d", w.Code)
	}
	if w := do(http.MethodGet, "/$console/api/namespace", "", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("namespace without signing in: %d", w.Code)
	}
	body := `{"keyName":"` + sas.DevKeyName + `","key":"` + sas.DevKey + `"}`
	if w := do(http.MethodPost, "/$console/api/signin", body, nil); w.Code != http.StatusForbidden {
		t.Errorf("sign-in without the console's header (a cross-site form): %d", w.Code)
	}
	if w := do(http.MethodPost, "/$console/api/signin", `{"keyName":"`+sas.DevKeyName+`","key":"no"}`, console); w.Code != http.StatusUnauthorized {
		t.Errorf("sign-in with a wrong key: %d", w.Code)
	}
	if w := do(http.MethodPost, "/$console/api/signin", `{"keyName":`, console); w.Code != http.StatusBadRequest {
		t.Errorf("sign-in with broken JSON: %d", w.Code)
	}
	w := do(http.MethodPost, "/$console/api/signin", body, console)
	if w.Code != http.StatusOK {
		t.Fatalf("sign-in: %d %s", w.Code, w.Body)
	}
	var cookie *http.Cookie
	for _, c := range w.Result().Cookies() {
		if c.Name == consoleCookie {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.MaxAge <= 0 || cookie.MaxAge > int(time.Hour/time.Second) {
		t.Fatalf("the sign-in cookie: %+v", cookie)
	}
	if w := do(http.MethodGet, "/$console/api/nothing", "", nil, cookie); w.Code != http.StatusNotFound {
		t.Errorf("an unknown endpoint, signed in: %d", w.Code)
	}
	if w := do(http.MethodPost, "/$console/api/purge", `{"name":"q"}`, console, cookie); w.Code != http.StatusNotImplemented {
		t.Errorf("purge on a gateway without Messages: %d %s", w.Code, w.Body)
	}
	forged := &http.Cookie{Name: consoleCookie, Value: "U2hhcmVkQWNjZXNzU2lnbmF0dXJlIHNyPXgmc2lnPXkmc2U9MSZza249eg"}
	if w := do(http.MethodGet, "/$console/api/namespace", "", nil, forged); w.Code != http.StatusUnauthorized {
		t.Errorf("a forged cookie: %d", w.Code)
	}
}

// FuzzMessageView: what the console shows of a message, and the view a
// re-drive filter reads, come from any bytes without a panic; a message
// the SDKs would send gives its properties back.
func FuzzMessageView(f *testing.F) {
	subject := "s"
	m := &amqp.Message{
		Properties:            &amqp.MessageProperties{MessageID: "id", Subject: &subject, CorrelationID: amqp.UUID{1}},
		ApplicationProperties: map[string]any{"colour": "red", "n": int64(3), "t": time.UnixMilli(5), "b": []byte{1}, "nan": math.NaN()},
		Data:                  [][]byte{[]byte("hello")},
	}
	good, err := m.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{0x00, 0x53, 0x77, 0xa1, 0x01, 'x'})
	f.Add([]byte{})
	// Delivery annotations whose key is a list: go-amqp's decoder panics
	// (hash of an unhashable type).
	f.Add([]byte("\x00Sx\xd1\x00\x00\x00\x19\x00\x00\x00\x02EA0000000000000000000"))
	f.Fuzz(func(t *testing.T, bare []byte) {
		out := messageOf(&partitionpb.Message{SequenceNumber: 1, Bare: bare})
		if _, err := json.Marshal(out); err != nil {
			t.Fatalf("the console could not send what it shows of a message: %v", err)
		}
		v, err := FilterViewOf(bare)
		if err == nil && out.BodyEncoding == "value" && strings.HasPrefix(out.Body, "(the message does not decode") {
			t.Fatalf("FilterViewOf decodes what messageOf could not: %v", v)
		}
		if string(bare) == string(good) {
			if v.GetSubject() != "s" || v.GetProperties()["colour"].GetStringValue() != "red" || out.Body != "hello" {
				t.Fatalf("the SDK-like message: view %v, shown %+v", v, out)
			}
		}
	})
}
