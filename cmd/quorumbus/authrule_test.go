package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/cmd/quorumbus/cluster"
	"github.com/quorumbus/quorumbus/proto/placementpb"
)

// TestAuthRuleCommands: the auth-rule CLI against three `node` processes
// and a `frontend` (plain cluster plane): create prints keys that the Go
// SDK sends with once the rule reached the front-end, list names the
// rule without its keys, keys prints them again, regenerate-keys makes
// the old primary key fail and the new one work, and delete lets nobody
// in with it.
func TestAuthRuleCommands(t *testing.T) {
	c := startPlainCluster(t)
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := cluster.CreateQueues(ctx, c.grpcAddrs, nil, []cluster.QueueSpec{{Name: "ar", Props: &placementpb.QueueProperties{}}}, quiet); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		args = append(args, "-placement", c.grpcAddrs[1])
		out, err := exec.CommandContext(ctx, bin, append([]string{"auth-rule"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("auth-rule %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	primaryRE := regexp.MustCompile(`PrimaryKey:\s+(\S+)`)
	primary := func(out string) string {
		t.Helper()
		m := primaryRE.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no primary key in %q", out)
		}
		return m[1]
	}
	// sendWith sends one message with the rule's key until the wanted
	// outcome (the front-end learns rule changes through its routing
	// table, a moment later), and reports whether it got it.
	sendWith := func(key string, wantOK bool) bool {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			client, err := azservicebus.NewClientFromConnectionString(cluster.RuleConnectionString(c.amqpAddr, "ar-sender", key), nil)
			if err != nil {
				t.Fatal(err)
			}
			sctx, scancel := context.WithTimeout(ctx, 15*time.Second)
			err = func() error {
				s, err := client.NewSender("ar", nil)
				if err != nil {
					return err
				}
				defer s.Close(sctx)
				return s.SendMessage(sctx, &azservicebus.Message{Body: []byte("x")}, nil)
			}()
			scancel()
			client.Close(ctx)
			var sbErr *azservicebus.Error
			unauthorized := errors.As(err, &sbErr) && sbErr.Code == azservicebus.CodeUnauthorizedAccess
			if wantOK && err == nil || !wantOK && unauthorized {
				return true
			}
			if err != nil && !unauthorized {
				t.Logf("send: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		return false
	}

	out := cli("create", "ar-sender", "-entity", "ar", "-rights", "Send", "-endpoint", c.amqpAddr)
	key := primary(out)
	if !strings.Contains(out, "Endpoint=sb://"+c.amqpAddr+";SharedAccessKeyName=ar-sender;SharedAccessKey="+key) {
		t.Fatalf("create printed no connection string with the key:\n%s", out)
	}
	if !sendWith(key, true) {
		t.Fatal("the created rule's key never sent")
	}
	list := cli("list")
	if !regexp.MustCompile(`ar-sender\s+ar\s+Send`).MatchString(list) || strings.Contains(list, key) {
		t.Fatalf("list:\n%s\nwant the rule on ar with Send and no key", list)
	}
	if got := primary(cli("keys", "ar-sender", "-entity", "ar")); got != key {
		t.Fatalf("keys printed primary %q, want %q", got, key)
	}
	newKey := primary(cli("regenerate-keys", "ar-sender", "-entity", "ar", "-key", "primary"))
	if newKey == key {
		t.Fatal("regenerate-keys kept the primary key")
	}
	if !sendWith(key, false) {
		t.Fatal("the old primary key still sends after regenerate-keys")
	}
	if !sendWith(newKey, true) {
		t.Fatal("the regenerated primary key does not send")
	}
	if out := cli("delete", "ar-sender", "-entity", "ar"); !strings.Contains(out, "deleted ar-sender on ar") {
		t.Fatalf("delete: %s", out)
	}
	if !sendWith(newKey, false) {
		t.Fatal("a deleted rule's key still sends")
	}
	if list := cli("list"); strings.Contains(list, "ar-sender") {
		t.Fatalf("list after delete:\n%s", list)
	}
}
