package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/quorumbus/quorumbus/placement/sas"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// createOnly is a catalog that creates whatever it is asked to and
// counts the calls; no other call is expected.
type createOnly struct {
	placementpb.PlacementServiceClient
	created int
}

func (c *createOnly) CreateEntity(ctx context.Context, in *placementpb.CreateEntityRequest, _ ...grpc.CallOption) (*placementpb.Entity, error) {
	c.created++
	return &placementpb.Entity{Name: in.GetName(), Kind: in.GetKind(), Properties: in.GetProperties()}, nil
}

// jsSign signs as @azure/core-amqp does: the audience escaped by
// encodeURIComponent, upper-case escapes kept.
func jsSign(audience, keyName, key string, expiry time.Time) string {
	sr := strings.ReplaceAll(url.QueryEscape(audience), "+", "%20")
	se := strconv.FormatInt(expiry.Unix(), 10)
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(sr + "\n" + se))
	sig := base64.StdEncoding.EncodeToString(h.Sum(nil))
	return "SharedAccessSignature sr=" + sr + "&sig=" + url.QueryEscape(sig) + "&se=" + se + "&skn=" + url.QueryEscape(keyName)
}

func subscriptionEntry(props string) string {
	return `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><SubscriptionDescription xmlns="` + sbNS + `">` + props + `</SubscriptionDescription></content></entry>`
}

// TestForwardNeedsSupplementaryAuthorization: a description with
// ForwardTo or ForwardDeadLetteredMessagesTo needs, besides the Manage
// token, a token in ServiceBusSupplementaryAuthorization /
// ServiceBusDlqSupplementaryAuthorization with Send on the target, in
// the forms the Go client (the target's name) and the JavaScript client
// (the namespace's host) sign; otherwise 401 and the catalog is not
// asked.
func TestForwardNeedsSupplementaryAuthorization(t *testing.T) {
	const host = "localhost:5300"
	exp := time.Now().Add(time.Hour)
	v := validator(t,
		sas.Rule{Name: sas.DevKeyName, Rights: sas.Manage | sas.Send | sas.Listen, PrimaryKey: sas.DevKey},
		sas.Rule{Name: "listener", Rights: sas.Listen, PrimaryKey: "listen-key"},
		sas.Rule{Name: "dest-sender", Entity: "dest", Rights: sas.Send, PrimaryKey: "dest-key"},
	)
	cat := &createOnly{}
	g, err := New(Config{Catalog: cat, Stats: noStats{}, Validator: v})
	if err != nil {
		t.Fatal(err)
	}
	manage := sign("https://"+host+"/", sas.DevKeyName, sas.DevKey, exp)
	goForm := sign("dest", sas.DevKeyName, sas.DevKey, exp)
	jsForm := jsSign("localhost:5300", sas.DevKeyName, sas.DevKey, exp)
	queue := queueEntry(`<ForwardTo>dest</ForwardTo>`)
	dlq := queueEntry(`<ForwardDeadLetteredMessagesTo>sb://localhost:5300/dest</ForwardDeadLetteredMessagesTo>`)
	sub := subscriptionEntry(`<ForwardTo>dest</ForwardTo>`)
	for _, tc := range []struct {
		name, path, body string
		header           map[string]string
		want             int
	}{
		{"queue, no header", "/src", queue, nil, 401},
		{"queue, go client's token", "/src", queue, map[string]string{forwardAuthHeader: goForm}, 201},
		{"queue, js client's token", "/src", queue, map[string]string{forwardAuthHeader: jsForm}, 201},
		{"queue, URL token", "/src", queue, map[string]string{forwardAuthHeader: sign("sb://"+host+"/dest", sas.DevKeyName, sas.DevKey, exp)}, 201},
		{"queue, a send rule on the target", "/src", queue, map[string]string{forwardAuthHeader: sign("dest", "dest-sender", "dest-key", exp)}, 201},
		{"queue, token in the DLQ header only", "/src", queue, map[string]string{dlqForwardAuthHeader: goForm}, 401},
		{"queue, listen rule", "/src", queue, map[string]string{forwardAuthHeader: sign("dest", "listener", "listen-key", exp)}, 401},
		{"queue, send rule on the target used for another", "/src", queueEntry(`<ForwardTo>other</ForwardTo>`), map[string]string{forwardAuthHeader: sign("other", "dest-sender", "dest-key", exp)}, 401},
		{"queue, token for another entity", "/src", queue, map[string]string{forwardAuthHeader: sign("other", sas.DevKeyName, sas.DevKey, exp)}, 401},
		{"queue, wrong key", "/src", queue, map[string]string{forwardAuthHeader: sign("dest", sas.DevKeyName, "guess", exp)}, 401},
		{"queue, expired", "/src", queue, map[string]string{forwardAuthHeader: sign("dest", sas.DevKeyName, sas.DevKey, time.Now().Add(-time.Minute))}, 401},
		{"queue, another namespace's URL", "/src", queue, map[string]string{forwardAuthHeader: sign("sb://evil.example/dest", sas.DevKeyName, sas.DevKey, exp)}, 401},
		{"queue, garbage", "/src", queue, map[string]string{forwardAuthHeader: "Bearer x"}, 401},
		{"dlq, no header", "/src", dlq, nil, 401},
		{"dlq, token in the ForwardTo header only", "/src", dlq, map[string]string{forwardAuthHeader: goForm}, 401},
		{"dlq, go client's token for the URL", "/src", dlq, map[string]string{dlqForwardAuthHeader: sign("sb://localhost:5300/dest", sas.DevKeyName, sas.DevKey, exp)}, 201},
		{"subscription, no header", "/t/Subscriptions/s", sub, nil, 401},
		{"subscription, go client's token", "/t/Subscriptions/s", sub, map[string]string{forwardAuthHeader: goForm}, 201},
		{"no forwarding, no header", "/src", queueEntry(`<MaxDeliveryCount>3</MaxDeliveryCount>`), nil, 201},
		{"nil ForwardTo, no header", "/src", queueEntry(`<ForwardTo i:nil="true"/>`), nil, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPut, "https://"+host+tc.path+"?api-version=2024-05", strings.NewReader(tc.body))
			r.Header.Set("Authorization", manage)
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			before := cat.created
			w := httptest.NewRecorder()
			g.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.want, w.Body)
			}
			if tc.want == 401 && cat.created != before {
				t.Fatal("refused, but the catalog was asked to create it")
			}
			if tc.want == 401 && !strings.Contains(w.Body.String(), "Send right on its target") {
				t.Fatalf("refusal without the reason: %s", w.Body)
			}
		})
	}
}
