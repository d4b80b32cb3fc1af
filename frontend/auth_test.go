package frontend_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"

	"github.com/quorumbus/quorumbus/frontend"
	"github.com/quorumbus/quorumbus/placement/sas"
)

// These tests check claims-based security as clients see it: the official
// Go SDK with connection strings of rules of each kind, and raw go-amqp
// clients that put tokens on $cbs themselves or log in with SASL PLAIN.

func authRules(t testing.TB) frontend.RuleSource {
	rs, err := sas.NewRuleset(
		sas.DevRule(),
		sas.Rule{Name: "listener", Rights: sas.Listen, PrimaryKey: "listen-key"},
		sas.Rule{Name: "sender", Rights: sas.Send, PrimaryKey: "send-key", SecondaryKey: "send-key-2"},
		sas.Rule{Name: "qonly", Entity: "q", Rights: sas.Listen | sas.Send, PrimaryKey: "q-key"},
	)
	if err != nil {
		t.Fatal(err)
	}
	return frontend.StaticRules(rs)
}

func startAuthFrontend(t *testing.T, b frontend.Backend, claimTimeout time.Duration) string {
	t.Helper()
	_, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: authRules(t), ReceiveWait: 500 * time.Millisecond, ClaimTimeout: claimTimeout})
	return addr
}

func keyClient(t *testing.T, addr, keyName, key string) *azservicebus.Client {
	t.Helper()
	cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true", addr, keyName, key)
	c, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func sasClient(t *testing.T, addr, token string) *azservicebus.Client {
	t.Helper()
	cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessSignature=%s;UseDevelopmentEmulator=true", addr, token)
	c, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func isUnauthorized(err error) bool {
	var sbErr *azservicebus.Error
	return errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeUnauthorizedAccess
}

func sendOne(ctx context.Context, c *azservicebus.Client, queue string) error {
	snd, err := c.NewSender(queue, nil)
	if err != nil {
		return err
	}
	defer snd.Close(ctx)
	return snd.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
}

func receiveOne(ctx context.Context, c *azservicebus.Client, queue string) ([]*azservicebus.ReceivedMessage, error) {
	rcv, err := c.NewReceiverForQueue(queue, nil)
	if err != nil {
		return nil, err
	}
	defer rcv.Close(ctx)
	return rcv.ReceiveMessages(ctx, 1, nil)
}

func peekOne(ctx context.Context, c *azservicebus.Client, queue string) error {
	rcv, err := c.NewReceiverForQueue(queue, nil)
	if err != nil {
		return err
	}
	defer rcv.Close(ctx)
	_, err = rcv.PeekMessages(ctx, 1, nil)
	return err
}

// TestSDKWrongKeyEnqueuesNothing: a connection string with a wrong key,
// or a rule that does not exist, is refused as unauthorized (not retried)
// and nothing reaches the queue.
func TestSDKWrongKeyEnqueuesNothing(t *testing.T) {
	b := newMemBackend("q")
	addr := startAuthFrontend(t, b, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, cred := range [][2]string{{sas.DevKeyName, "not-the-key"}, {"nobody", sas.DevKey}, {"sender", "listen-key"}} {
		start := time.Now()
		err := sendOne(ctx, keyClient(t, addr, cred[0], cred[1]), "q")
		if !isUnauthorized(err) {
			t.Fatalf("%s: send with a wrong key: %v, want unauthorized", cred[0], err)
		}
		if time.Since(start) > 3*time.Second {
			t.Fatalf("%s: refused after %s: the SDK retried, so the refusal was not final", cred[0], time.Since(start))
		}
	}
	if n := b.left("q"); n != 0 {
		t.Fatalf("%d messages enqueued with wrong keys", n)
	}
	// The rule's secondary key works.
	if err := sendOne(ctx, keyClient(t, addr, "sender", "send-key-2"), "q"); err != nil {
		t.Fatal(err)
	}
}

// TestSDKTokenForAnotherEntityRefused: a pre-built SAS token for one queue
// does not open another, nor the namespace.
func TestSDKTokenForAnotherEntityRefused(t *testing.T) {
	b := newMemBackend("q", "other")
	addr := startAuthFrontend(t, b, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	token := sas.Sign(sas.DevKeyName, sas.DevKey, "amqp://"+addr+"/other", time.Now().Add(time.Hour))
	c := sasClient(t, addr, token)
	if err := sendOne(ctx, c, "q"); !isUnauthorized(err) {
		t.Fatalf("send to q with a token for other: %v, want unauthorized", err)
	}
	if n := b.left("q"); n != 0 {
		t.Fatalf("%d messages enqueued", n)
	}
	if err := sendOne(ctx, c, "other"); err != nil {
		t.Fatalf("send to other with its token: %v", err)
	}
	// A token signed for another namespace host is refused as well.
	foreign := sas.Sign(sas.DevKeyName, sas.DevKey, "amqp://elsewhere.example/q", time.Now().Add(time.Hour))
	if err := sendOne(ctx, sasClient(t, addr, foreign), "q"); !isUnauthorized(err) {
		t.Fatalf("send with a token for another namespace: %v, want unauthorized", err)
	}
	if n := b.left("q"); n != 0 {
		t.Fatalf("%d messages enqueued", n)
	}
}

// TestSDKListenOnlyRule: a Listen rule receives but cannot send.
func TestSDKListenOnlyRule(t *testing.T) {
	b := newMemBackend("q")
	addr := startAuthFrontend(t, b, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sendOne(ctx, keyClient(t, addr, sas.DevKeyName, sas.DevKey), "q"); err != nil {
		t.Fatal(err)
	}
	c := keyClient(t, addr, "listener", "listen-key")
	if err := sendOne(ctx, c, "q"); !isUnauthorized(err) {
		t.Fatalf("send with a Listen rule: %v, want unauthorized", err)
	}
	if n := b.left("q"); n != 1 {
		t.Fatalf("%d messages in the queue, want 1", n)
	}
	if err := peekOne(ctx, c, "q"); err != nil {
		t.Fatalf("peek with a Listen rule: %v", err)
	}
	msgs, err := receiveOne(ctx, c, "q")
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive with a Listen rule: %d messages, %v", len(msgs), err)
	}
}

// TestSDKSendOnlyRule: a Send rule sends and schedules but cannot
// receive or peek.
func TestSDKSendOnlyRule(t *testing.T) {
	b := newMemBackend("q")
	addr := startAuthFrontend(t, b, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := keyClient(t, addr, "sender", "send-key")
	if err := sendOne(ctx, c, "q"); err != nil {
		t.Fatalf("send with a Send rule: %v", err)
	}
	if _, err := receiveOne(ctx, c, "q"); !isUnauthorized(err) {
		t.Fatalf("receive with a Send rule: %v, want unauthorized", err)
	}
	if err := peekOne(ctx, c, "q"); !isUnauthorized(err) {
		t.Fatalf("peek with a Send rule: %v, want unauthorized", err)
	}
	if n := b.left("q"); n != 1 {
		t.Fatalf("%d messages in the queue, want the 1 sent", n)
	}
}

// TestSDKEntityRuleOnItsEntityOnly: a rule on queue q opens q and its
// dead-letter queue, not another queue.
func TestSDKEntityRuleOnItsEntityOnly(t *testing.T) {
	b := newMemBackend("q", "other")
	addr := startAuthFrontend(t, b, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := keyClient(t, addr, "qonly", "q-key")
	if err := sendOne(ctx, c, "q"); err != nil {
		t.Fatalf("send to q with q's rule: %v", err)
	}
	if msgs, err := receiveOne(ctx, c, "q"); err != nil || len(msgs) != 1 {
		t.Fatalf("receive from q with q's rule: %d, %v", len(msgs), err)
	}
	dlq, err := c.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dlq.PeekMessages(ctx, 1, nil); err != nil {
		t.Fatalf("peek q's dead-letter queue with q's rule: %v", err)
	}
	dlq.Close(ctx)
	if err := sendOne(ctx, c, "other"); !isUnauthorized(err) {
		t.Fatalf("send to other with q's rule: %v, want unauthorized", err)
	}
	if _, err := receiveOne(ctx, c, "other"); !isUnauthorized(err) {
		t.Fatalf("receive from other with q's rule: %v, want unauthorized", err)
	}
	if n := b.left("other"); n != 0 {
		t.Fatalf("%d messages reached other", n)
	}
}

// rawConn dials with SASL ANONYMOUS, as the SDKs do, without any token.
func rawConn(t *testing.T, ctx context.Context, addr string) *goamqp.Conn {
	t.Helper()
	conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// putToken puts a SAS token on $cbs for audience and returns the status
// and description of the answer.
func putToken(t *testing.T, ctx context.Context, conn *goamqp.Conn, audience, token string) (int32, string) {
	t.Helper()
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	snd, err := s.NewSender(ctx, "$cbs", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := s.NewReceiver(ctx, "$cbs", &goamqp.ReceiverOptions{TargetAddress: "cbs-reply", Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	replyTo := "cbs-reply"
	err = snd.Send(ctx, &goamqp.Message{
		Properties: &goamqp.MessageProperties{MessageID: "put-1", ReplyTo: &replyTo},
		ApplicationProperties: map[string]any{
			"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": audience,
		},
		Value: token,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	status, _ := resp.ApplicationProperties["status-code"].(int32)
	desc, _ := resp.ApplicationProperties["status-description"].(string)
	return status, desc
}

func amqpCondition(err error) (goamqp.ErrCond, string) {
	var ae *goamqp.Error
	if errors.As(err, &ae) {
		return ae.Condition, ae.Description
	}
	return "", ""
}

// TestAttachWithoutTokenRefused: an ANONYMOUS connection without a claim
// gets amqp:unauthorized-access on every attach, in Azure's words, and
// learns nothing: a missing queue is refused the same way as a real one.
func TestAttachWithoutTokenRefused(t *testing.T) {
	b := newMemBackend("q")
	addr := startAuthFrontend(t, b, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := rawConn(t, ctx, addr)
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		attach func() error
		right  string
		addr   string
	}{
		{func() error { _, err := s.NewSender(ctx, "q", nil); return err }, "Send", "q"},
		{func() error { _, err := s.NewReceiver(ctx, "q", nil); return err }, "Listen", "q"},
		{func() error { _, err := s.NewReceiver(ctx, "q/$DeadLetterQueue", nil); return err }, "Listen", "q/$DeadLetterQueue"},
		{func() error { _, err := s.NewSender(ctx, "q/$management", nil); return err }, "Listen,Send", "q/$management"},
		{func() error { _, err := s.NewSender(ctx, "missing", nil); return err }, "Send", "missing"},
	} {
		cond, desc := amqpCondition(tc.attach())
		want := fmt.Sprintf("'%s' claim(s) are required to perform this operation. Resource: 'sb://%s/%s'. TrackingId:", tc.right, hostOf(addr), tc.addr)
		if cond != goamqp.ErrCondUnauthorizedAccess || !strings.Contains(desc, want) {
			t.Fatalf("attach %s: %s %q, want unauthorized-access with %q", tc.addr, cond, desc, want)
		}
	}
	// A bad token is answered 401 and grants nothing.
	if status, desc := putToken(t, ctx, conn, "amqp://"+addr+"/q", sas.Sign(sas.DevKeyName, "wrong", "amqp://"+addr+"/q", time.Now().Add(time.Hour))); status != 401 || !strings.Contains(desc, "signature") {
		t.Fatalf("put-token with a wrong key: %d %q", status, desc)
	}
	if status, _ := putToken(t, ctx, conn, "amqp://"+addr+"/q", "SharedAccessSignature junk"); status != 401 {
		t.Fatalf("put-token with junk: %d", status)
	}
	if _, err := s.NewSender(ctx, "q", nil); err == nil {
		t.Fatal("attach after a refused token succeeded")
	}
	// A good one opens q.
	if status, _ := putToken(t, ctx, conn, "amqp://"+addr+"/q", sas.Sign(sas.DevKeyName, sas.DevKey, "amqp://"+addr+"/q", time.Now().Add(time.Hour))); status != 202 {
		t.Fatalf("put-token: %d", status)
	}
	if _, err := s.NewSender(ctx, "q", nil); err != nil {
		t.Fatalf("attach with a claim: %v", err)
	}
	if b.left("q") != 0 {
		t.Fatal("messages appeared")
	}
}

// hostOf is the host go-amqp sends in its open frame: the address's,
// without the port.
func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

// amqpSendWithClaim sends a message, "renewed", to queue on a new session
// of conn, under the claims conn holds.
func amqpSendWithClaim(t *testing.T, ctx context.Context, conn *goamqp.Conn, queue string) error {
	t.Helper()
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		return err
	}
	defer s.Close(ctx)
	snd, err := s.NewSender(ctx, queue, nil)
	if err != nil {
		return err
	}
	return snd.Send(ctx, goamqp.NewMessage([]byte("renewed")), nil)
}

// TestSASLPlain: a rule's name and key log in for the connection's life;
// a wrong key fails the SASL layer.
func TestSASLPlain(t *testing.T) {
	b := newMemBackend("q", "other")
	addr := startAuthFrontend(t, b, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snd := amqpSender(t, ctx, addr, "q") // the dev rule, by SASL PLAIN
	if err := snd.Send(ctx, goamqp.NewMessage([]byte("plain")), nil); err != nil {
		t.Fatal(err)
	}
	for _, cred := range [][2]string{{sas.DevKeyName, "wrong"}, {"nobody", sas.DevKey}, {sas.DevKeyName, ""}} {
		if conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain(cred[0], cred[1])}); err == nil {
			conn.Close()
			t.Fatalf("SASL PLAIN %s with a wrong key succeeded", cred[0])
		}
	}
	// An entity rule logs in for its entity only.
	conn, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("qonly", "q-key")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewSender(ctx, "q", nil); err != nil {
		t.Fatalf("q's rule on q: %v", err)
	}
	if _, err := s.NewSender(ctx, "other", nil); err == nil {
		t.Fatal("q's rule opened other")
	}
	if b.left("q") != 1 || b.left("other") != 0 {
		t.Fatalf("q holds %d, other %d", b.left("q"), b.left("other"))
	}
}

// TestClaimPresentationBounded: a connection that presents no claim in
// time is closed; one that skips SASL is refused.
func TestClaimPresentationBounded(t *testing.T) {
	addr := startAuthFrontend(t, newMemBackend("q"), 300*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := rawConn(t, ctx, addr)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := conn.NewSession(ctx, nil); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a connection without a claim is still open")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if c, err := goamqp.Dial(ctx, "amqp://"+addr, nil); err == nil {
		_, err = c.NewSession(ctx, nil)
		c.Close()
		if err == nil {
			t.Fatal("a connection without SASL was served")
		}
	}
}

// syncBuffer is a log sink safe for the front-end's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestKeysNeverLogged: with debug logging, a session of good and bad
// logins and tokens leaves no key and no token in the log.
func TestKeysNeverLogged(t *testing.T) {
	var logs syncBuffer
	b := newMemBackend("q")
	srv, addr := serveFrontend(t, frontend.Config{Backend: b, Rules: authRules(t), Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	wrongKey := "wrong-key-" + strings.Repeat("w", 20)
	if err := sendOne(ctx, keyClient(t, addr, "sender", wrongKey), "q"); !isUnauthorized(err) {
		t.Fatalf("wrong key: %v", err)
	}
	if err := sendOne(ctx, keyClient(t, addr, "sender", "send-key"), "q"); err != nil {
		t.Fatal(err)
	}
	if c, err := goamqp.Dial(ctx, "amqp://"+addr, &goamqp.ConnOptions{SASLType: goamqp.SASLTypePlain("listener", wrongKey)}); err == nil {
		c.Close()
		t.Fatal("SASL PLAIN with a wrong key succeeded")
	}
	conn := rawConn(t, ctx, addr)
	putToken(t, ctx, conn, "amqp://"+addr+"/q", sas.Sign("qonly", wrongKey, "amqp://"+addr+"/q", time.Now().Add(time.Hour)))
	putToken(t, ctx, conn, "amqp://"+addr+"/q", "SharedAccessSignature sr=x&sig="+wrongKey+"&se=1&skn=qonly")
	srv.Shutdown(context.Background())

	out := logs.String()
	if !strings.Contains(out, "put-token refused") || !strings.Contains(out, "SASL PLAIN refused") {
		t.Fatalf("the refusals were not logged at debug, so this test checks nothing:\n%s", out)
	}
	for _, secret := range []string{wrongKey, "send-key", "listen-key", "q-key", sas.DevKey, "sig=", "SharedAccessSignature"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q:\n%s", secret, out)
		}
	}
}

// TestPutTokenFloodAndCBSLinks: a connection that floods $cbs with tokens,
// good and bad, gets an answer to each and costs others nothing; a
// connection that holds too many $cbs links is refused more.
func TestPutTokenFloodAndCBSLinks(t *testing.T) {
	b := newMemBackend("q")
	addr := startAuthFrontend(t, b, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn := rawConn(t, ctx, addr)
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := s.NewSender(ctx, "$cbs", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := s.NewReceiver(ctx, "$cbs", &goamqp.ReceiverOptions{TargetAddress: "flood-reply", Credit: 100})
	if err != nil {
		t.Fatal(err)
	}
	replyTo := "flood-reply"
	const n = 500
	go func() {
		for i := range n {
			aud := fmt.Sprintf("amqp://%s/q%d", addr, i)
			key := sas.DevKey
			if i%2 == 1 {
				key = "wrong"
			}
			snd.Send(ctx, &goamqp.Message{
				Properties:            &goamqp.MessageProperties{MessageID: fmt.Sprint(i), ReplyTo: &replyTo},
				ApplicationProperties: map[string]any{"operation": "put-token", "type": "servicebus.windows.net:sastoken", "name": aud},
				Value:                 sas.Sign(sas.DevKeyName, key, aud, time.Now().Add(time.Hour)),
			}, nil)
		}
	}()
	// Meanwhile another client sends.
	other := amqpSender(t, ctx, addr, "q")
	for range 10 {
		if err := other.Send(ctx, goamqp.NewMessage([]byte("meanwhile")), nil); err != nil {
			t.Fatal(err)
		}
	}
	ok, refused := 0, 0
	for range n {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatalf("after %d answers: %v", ok+refused, err)
		}
		rcv.AcceptMessage(ctx, m)
		switch m.ApplicationProperties["status-code"] {
		case int32(202):
			ok++
		case int32(401):
			refused++
		default:
			t.Fatalf("answer %v", m.ApplicationProperties)
		}
	}
	if ok != n/2 || refused != n/2 {
		t.Fatalf("%d accepted, %d refused, want %d each", ok, refused, n/2)
	}
	if b.left("q") != 10 {
		t.Fatalf("q holds %d", b.left("q"))
	}
	// $cbs links beyond the bound are refused; the connection lives on.
	var refusedLink error
	for range 20 {
		if _, err := s.NewSender(ctx, "$cbs", nil); err != nil {
			refusedLink = err
			break
		}
	}
	if cond, _ := amqpCondition(refusedLink); cond != goamqp.ErrCondResourceLimitExceeded {
		t.Fatalf("the 17th $cbs link: %v, want resource-limit-exceeded", refusedLink)
	}
	// The claims stand: q0's (a good token) gets past authorization to
	// the lookup, q1's (a bad one) does not.
	if _, err := s.NewSender(ctx, "q0", nil); !isCond(err, goamqp.ErrCondNotFound) {
		t.Fatalf("q0 with its claim: %v, want not-found", err)
	}
	if _, err := s.NewSender(ctx, "q1", nil); !isCond(err, goamqp.ErrCondUnauthorizedAccess) {
		t.Fatalf("q1 without a claim: %v, want unauthorized-access", err)
	}
}

func isCond(err error, want goamqp.ErrCond) bool {
	cond, _ := amqpCondition(err)
	return cond == want
}

// mgmtCall sends one $management request on a new link pair to path
// (<entity>/$management) and returns the answer's status and description.
func mgmtCall(t *testing.T, ctx context.Context, conn *goamqp.Conn, path, op string, body map[string]any) (int32, string) {
	t.Helper()
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	snd, err := s.NewSender(ctx, path, nil)
	if err != nil {
		t.Fatalf("attach %s: %v", path, err)
	}
	const replyTo = "mgmt-reply"
	rcv, err := s.NewReceiver(ctx, path, &goamqp.ReceiverOptions{TargetAddress: replyTo, Credit: 10})
	if err != nil {
		t.Fatalf("attach the reply link of %s: %v", path, err)
	}
	reply := replyTo
	err = snd.Send(ctx, &goamqp.Message{
		Properties:            &goamqp.MessageProperties{MessageID: "req-1", ReplyTo: &reply},
		ApplicationProperties: map[string]any{"operation": op},
		Value:                 body,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rcv.Receive(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	status, _ := resp.ApplicationProperties["status-code"].(int32)
	desc, _ := resp.ApplicationProperties["status-description"].(string)
	return status, desc
}

// claimConn is an ANONYMOUS connection holding rule's claim on queue.
func claimConn(t *testing.T, ctx context.Context, addr, rule, key, queue string) *goamqp.Conn {
	t.Helper()
	conn := rawConn(t, ctx, addr)
	aud := "amqp://" + addr + "/" + queue
	if status, desc := putToken(t, ctx, conn, aud, sas.Sign(rule, key, aud, time.Now().Add(time.Hour))); status != 202 {
		t.Fatalf("put-token of %s: %d %s", rule, status, desc)
	}
	return conn
}

// TestManagementOperationRights: each $management operation checks its
// own right, as Azure does, on a link pair any claim on the path opens:
// rule operations need Manage, schedule and cancel Send, session
// operations Listen. Refusals answer 401 in Azure's words.
func TestManagementOperationRights(t *testing.T) {
	b := newMemBackend("q")
	addr := startAuthFrontend(t, b, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	refused := func(conn *goamqp.Conn, op string, body map[string]any, right string) {
		t.Helper()
		status, desc := mgmtCall(t, ctx, conn, "q/$management", op, body)
		want := fmt.Sprintf("'%s' claim(s) are required to perform this operation. Resource: 'sb://%s/q/$management'.", right, hostOf(addr))
		if status != 401 || !strings.Contains(desc, want) {
			t.Fatalf("%s: %d %q, want 401 with %q", op, status, desc, want)
		}
	}

	// Listen and Send on q (rule qonly) are not Manage.
	both := claimConn(t, ctx, addr, "qonly", "q-key", "q")
	refused(both, "com.microsoft:add-rule", map[string]any{"rule-name": "r", "rule-description": map[string]any{}}, "Manage")
	refused(both, "com.microsoft:remove-rule", map[string]any{"rule-name": "$Default"}, "Manage")

	// A Send rule schedules and cancels through the SDK.
	sendClient := keyClient(t, addr, "sender", "send-key")
	snd, err := sendClient.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := snd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}}, time.Now().Add(time.Hour), nil)
	if err != nil || len(seqs) != 1 {
		t.Fatalf("schedule with a Send rule: %v, %v", seqs, err)
	}
	if err := snd.CancelScheduledMessages(ctx, seqs, nil); err != nil {
		t.Fatalf("cancel with a Send rule: %v", err)
	}

	// A Listen rule may not: the SDK is refused, and on a link pair its
	// claim opens, so is each operation.
	lsnd, err := keyClient(t, addr, "listener", "listen-key").NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lsnd.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("x")}}, time.Now().Add(time.Hour), nil); !isUnauthorized(err) {
		t.Fatalf("schedule with a Listen rule: %v, want unauthorized", err)
	}
	if err := lsnd.CancelScheduledMessages(ctx, []int64{1}, nil); !isUnauthorized(err) {
		t.Fatalf("cancel with a Listen rule: %v, want unauthorized", err)
	}
	listener := claimConn(t, ctx, addr, "listener", "listen-key", "q")
	refused(listener, "com.microsoft:schedule-message", map[string]any{"messages": []any{}}, "Send")
	refused(listener, "com.microsoft:cancel-scheduled-message", map[string]any{"sequence-numbers": []int64{1}}, "Send")

	// A Send rule may not work with sessions.
	if _, err := sendClient.AcceptSessionForQueue(ctx, "q", "s1", nil); !isUnauthorized(err) {
		t.Fatalf("accept a session with a Send rule: %v, want unauthorized", err)
	}
	sender := claimConn(t, ctx, addr, "sender", "send-key", "q")
	for _, op := range []string{"com.microsoft:get-message-sessions", "com.microsoft:get-session-state",
		"com.microsoft:set-session-state", "com.microsoft:renew-session-lock"} {
		refused(sender, op, map[string]any{"session-id": "s1"}, "Listen")
	}
	if n := b.left("q"); n != 1 {
		t.Fatalf("q holds %d messages, want the 1 scheduled (memBackend keeps cancelled ones)", n)
	}
}
