package compat

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// TestConsolePreviews: the console's peek asks the partitions for bodies
// cut to its 4 KiB preview and shows what it showed when it cut whole
// bodies itself: a small message whole with its properties, a large
// binary body's first 4 KiB as base64 marked truncated, each with its
// whole size; a large text body's first 4 KiB, cut at a character's
// boundary (a cut through a character used to show it as base64).
func TestConsolePreviews(t *testing.T) {
	t.Parallel()
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cc := newConsoleClient(t, c)
	if code := cc.post("signin", map[string]string{"keyName": sas.DevKeyName, "key": sas.DevKey}, nil); code != http.StatusOK {
		t.Fatalf("sign-in: %d", code)
	}
	if _, err := ac.CreateQueue(ctx, "previews", nil); err != nil {
		t.Fatal(err)
	}
	waitRoutable(t, c, "previews")

	// 4095 bytes of x, then a two-byte character across the cut.
	text := append(bytes.Repeat([]byte("x"), 4095), []byte(strings.Repeat("é", 100_000))...)
	binary := make([]byte, 200<<10)
	for i := range binary {
		binary[i] = byte(i * 7)
	}
	sent := []*azservicebus.Message{
		{Body: []byte("hello"), Subject: to.Ptr("greeting"), ApplicationProperties: map[string]any{"colour": "red"}},
		{Body: text, ApplicationProperties: map[string]any{"colour": "blue"}},
		{Body: binary},
	}
	snd, err := client.NewSender("previews", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range sent {
		if err := snd.SendMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	snd.Close(ctx)

	var msgs []struct {
		Subject       string         `json:"subject"`
		Size          int64          `json:"size"`
		Properties    map[string]any `json:"properties"`
		Body          string         `json:"body"`
		BodyEncoding  string         `json:"bodyEncoding"`
		BodyTruncated bool           `json:"bodyTruncated"`
	}
	if code := cc.get("messages?name=previews", &msgs); code != http.StatusOK || len(msgs) != len(sent) {
		t.Fatalf("peek: %d, %d messages", code, len(msgs))
	}
	for i, m := range msgs {
		if m.Size < int64(len(sent[i].Body)) || m.Size > int64(len(sent[i].Body))+512 {
			t.Errorf("message %d: size %d for a body of %d bytes", i, m.Size, len(sent[i].Body))
		}
	}
	if m := msgs[0]; m.Body != "hello" || m.BodyEncoding != "text" || m.BodyTruncated || m.Subject != "greeting" || m.Properties["colour"] != "red" {
		t.Errorf("the small message: %+v", m)
	}
	if m := msgs[1]; m.Body != string(text[:4095]) || m.BodyEncoding != "text" || !m.BodyTruncated || m.Properties["colour"] != "blue" {
		t.Errorf("the text: %d bytes (%s, truncated %v), properties %v", len(m.Body), m.BodyEncoding, m.BodyTruncated, m.Properties)
	}
	if m := msgs[2]; m.Body != base64.StdEncoding.EncodeToString(binary[:4096]) || m.BodyEncoding != "base64" || !m.BodyTruncated {
		t.Errorf("the binary: %d characters (%s, truncated %v)", len(m.Body), m.BodyEncoding, m.BodyTruncated)
	}
}
