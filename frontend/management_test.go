package frontend_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// mgmtClient sends raw $management requests, so that tests can send what
// the SDKs never would: fields of the wrong type, a body that is not a map.
type mgmtClient struct {
	t    *testing.T
	snd  *goamqp.Sender
	rcv  *goamqp.Receiver
	n    int
	cond string // the last answer's error-condition, "" without one
}

func newMgmtClient(t *testing.T, addr, entity string) *mgmtClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(sas.DevKeyName, sas.DevKey)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	node := entity + "/$management"
	snd, err := s.NewSender(ctx, node, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := s.NewReceiver(ctx, node, &goamqp.ReceiverOptions{TargetAddress: "reply-to-me", Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	return &mgmtClient{t: t, snd: snd, rcv: rcv}
}

// do sends one request and returns the response's status and description.
func (m *mgmtClient) do(op string, body any) (int32, string) {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m.n++
	replyTo := "reply-to-me"
	req := &goamqp.Message{
		Properties:            &goamqp.MessageProperties{MessageID: "req-" + strings.Repeat("x", m.n), ReplyTo: &replyTo},
		ApplicationProperties: map[string]any{"operation": op},
		Value:                 body,
	}
	if err := m.snd.Send(ctx, req, nil); err != nil {
		m.t.Fatalf("%s: send: %v", op, err)
	}
	resp, err := m.rcv.Receive(ctx, nil)
	if err != nil {
		m.t.Fatalf("%s: receive: %v", op, err)
	}
	status, ok := resp.ApplicationProperties["status-code"].(int32)
	if !ok {
		m.t.Fatalf("%s: status-code %#v is not an int", op, resp.ApplicationProperties["status-code"])
	}
	desc, _ := resp.ApplicationProperties["status-description"].(string)
	m.cond = ""
	if c, ok := resp.ApplicationProperties["error-condition"]; ok {
		m.cond = fmt.Sprint(c)
	}
	return status, desc
}

// TestManagementRejectsMalformedFields: a request whose fields have the
// wrong type or value is answered 400 with a description that names the
// field, instead of running with defaults.
func TestManagementRejectsMalformedFields(t *testing.T) {
	b := newMemBackend("q")
	m := newMgmtClient(t, startFrontend(t, b), "q")
	unknownToken := goamqp.UUID{0xff, 0xfe, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
	for _, tc := range []struct {
		name, op string
		body     any
		want     string // in the description
	}{
		{"peek, body a string", "com.microsoft:peek-message", "garbage", "must be an amqp-value map"},
		{"peek, no body", "com.microsoft:peek-message", nil, "must be an amqp-value map"},
		{"peek, from-sequence-number a string", "com.microsoft:peek-message",
			map[string]any{"from-sequence-number": "zero", "message-count": int32(1)}, "from-sequence-number must be an integer"},
		{"peek, message-count -1", "com.microsoft:peek-message",
			map[string]any{"from-sequence-number": int64(0), "message-count": int32(-1)}, "message-count -1 is out of range"},
		{"peek, message-count missing", "com.microsoft:peek-message",
			map[string]any{"from-sequence-number": int64(0)}, "message-count must be an integer"},
		{"peek, from-sequence-number negative", "com.microsoft:peek-message",
			map[string]any{"from-sequence-number": int64(-5), "message-count": int32(1)}, "from-sequence-number -5 is out of range"},
		{"update-disposition, deadletter-reason an int", "com.microsoft:update-disposition",
			map[string]any{"disposition-status": "suspended", "lock-tokens": []goamqp.UUID{{}}, "deadletter-reason": int64(3)}, "deadletter-reason must be a string"},
		{"update-disposition, properties-to-modify a list", "com.microsoft:update-disposition",
			map[string]any{"disposition-status": "abandoned", "lock-tokens": []goamqp.UUID{{}}, "properties-to-modify": []any{"a"}}, "properties-to-modify must be a map"},
		{"peek, session-id of 129 characters", "com.microsoft:peek-message",
			map[string]any{"from-sequence-number": int64(0), "message-count": int32(1), "session-id": strings.Repeat("é", 129)}, "at most 128 are allowed"},
		{"receive-by-sequence-number, mode a string", "com.microsoft:receive-by-sequence-number",
			map[string]any{"sequence-numbers": []int64{1}, "receiver-settle-mode": "1"}, "receiver-settle-mode must be an integer"},
		{"receive-by-sequence-number, mode 7", "com.microsoft:receive-by-sequence-number",
			map[string]any{"sequence-numbers": []int64{1}, "receiver-settle-mode": uint32(7)}, "receiver-settle-mode 7 is out of range"},
	} {
		status, desc := m.do(tc.op, tc.body)
		if status != 400 || !strings.Contains(desc, tc.want) {
			t.Errorf("%s: %d %q, want 400 saying %q", tc.name, status, desc, tc.want)
		}
		if !strings.HasPrefix(m.cond, "amqp:") {
			t.Errorf("%s: error-condition %q, want an amqp: condition", tc.name, m.cond)
		}
	}
	// Well-formed requests still work.
	if status, desc := m.do("com.microsoft:peek-message", map[string]any{"from-sequence-number": int64(0), "message-count": int32(5)}); status != 204 {
		t.Errorf("peek of an empty queue: %d %q, want 204", status, desc)
	}
	// A lock token that names no partition of the entity is a lock lost.
	for _, op := range []string{"com.microsoft:renew-lock", "com.microsoft:update-disposition"} {
		body := map[string]any{"lock-tokens": []goamqp.UUID{unknownToken}, "disposition-status": "completed"}
		if status, desc := m.do(op, body); status != 410 || !strings.Contains(desc, "lock supplied is invalid") {
			t.Errorf("%s with an unknown lock token: %d %q, want 410 (lock lost)", op, status, desc)
		}
		// The condition travels too: the JavaScript SDK builds its
		// error from it.
		if m.cond != "com.microsoft:message-lock-lost" {
			t.Errorf("%s with an unknown lock token: error-condition %q, want com.microsoft:message-lock-lost", op, m.cond)
		}
	}
}

// TestSDKRenewUnknownLockIsLockLost: the Go SDK reports renewing a lock the
// broker does not know as CodeLockLost, as against Service Bus.
func TestSDKRenewUnknownLockIsLockLost(t *testing.T) {
	c := sdkClient(t, startFrontend(t, newMemBackend("q")))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rcv, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := &azservicebus.ReceivedMessage{LockToken: [16]byte{0xff, 0xfe, 0xfd, 0xfc, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}
	err = rcv.RenewMessageLock(ctx, msg, nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeLockLost {
		t.Fatalf("renewing an unknown lock: %v, want CodeLockLost", err)
	}
}
