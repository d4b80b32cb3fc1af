package compat

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/chromedp/chromedp"

	"github.com/quorumbus/quorumbus/placement/sas"
)

// chromium finds a Chromium binary (Debian's chromium package), or skips
// the test (fails it under CI, which installs one).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no chromium binary (Debian: apt-get install -y chromium); the console's browser test needs one"
	if os.Getenv("CI") != "" {
		t.Fatal(msg) // CI installs it (.ci/run): a missing browser is a broken run
	}
	t.Skip("SKIP: " + msg)
	return ""
}

// TestConsoleInBrowser drives the web console in headless Chromium: sign
// in, see a queue's counts, peek a message, re-drive a dead-lettered
// message and see it back in the queue. Screenshots of each step are
// kept under the test's artifact directory, which the test logs.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	c := startAdminDev(t)
	ac := adminClient(t, c, sas.DevKeyName, sas.DevKey)
	client := devClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := ac.CreateQueue(ctx, "invoices", &admin.CreateQueueOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRoutable(t, c, "invoices")
	deadLetterAll(t, ctx, client, "invoices", 2) // red-0 and blue-1, dead-lettered

	shots := artifactDir(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("ignore-certificate-errors", true), // the dev cluster's own CA
		chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1000),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644)
		})
	}
	base := "https://" + c.Admin.Addr() + "/$console/"
	do := func(step string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			_ = chromedp.Do(bctx, shot("failed-"+step))
			t.Fatalf("%s: %v (screenshots in %s)", step, err, shots)
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	do("sign in",
		chromedp.Navigate(base),
		chromedp.WaitVisible(chromedp.CSS("#signin-form")),
		chromedp.SetValue(chromedp.CSS("#keyName"), sas.DevKeyName),
		chromedp.SetValue(chromedp.CSS("#key"), sas.DevKey),
		shot("1-signin"),
		chromedp.Click(chromedp.CSS("#signin")),
		chromedp.WaitVisible(chromedp.CSS(`#entities tr[data-name="invoices"]`)),
		shot("2-namespace"),
	)
	if dead := text(`#entities tr[data-name="invoices"] td.dead`); dead != "2" {
		t.Fatalf("the namespace page shows %q dead-lettered messages of invoices, want 2", dead)
	}
	do("open the queue",
		chromedp.Click(chromedp.CSS(`#entities tr[data-name="invoices"] a`)),
		chromedp.WaitVisible(chromedp.CSS("#entity-page")),
		poll(`document.querySelector("#count-dead").textContent === "2"`),
		chromedp.Click(chromedp.CSS("#peek-dlq")),
		poll(`document.querySelector("#messages tbody").textContent.includes("bad-red")`),
		shot("3-dead-letter-queue"),
	)
	if active, dlqBody := text("#count-active"), text("#messages tbody"); active != "0" || !strings.Contains(dlqBody, "red-0") {
		t.Fatalf("the queue page: active %q; dead-letter queue shows %q", active, dlqBody)
	}
	do("re-drive one",
		chromedp.SetValue(chromedp.CSS("#redrive-filter"), "DeadLetterReason = 'bad-red'"),
		chromedp.Click(chromedp.CSS("#redrive")),
		poll(`document.querySelector("#action-result").textContent !== ""`),
		poll(`document.querySelector("#count-active").textContent === "1" && document.querySelector("#count-dead").textContent === "1"`),
		chromedp.Click(chromedp.CSS("#peek-main")),
		poll(`document.querySelector("#messages tbody").textContent.includes("red-0")`),
		shot("4-redriven"),
	)
	if result, mainBody := text("#action-result"), text("#messages tbody"); result != "re-drove 1" || strings.Contains(mainBody, "blue-1") {
		t.Fatalf("re-drive said %q; the queue shows %q", result, mainBody)
	}
	// The SDK receives it back.
	if got := receiveCompleted(t, ctx, client, "invoices", 1); got[0] != "red-0" {
		t.Fatalf("received %v after the re-drive, want red-0", got)
	}

	// Peek pages: 60 messages are a page of 50 and one of 10.
	sender, err := client.NewSender("invoices", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(ctx)
	batch, err := sender.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		if err := batch.AddMessage(&azservicebus.Message{Body: []byte(fmt.Sprintf("page-%02d", i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatal(err)
	}
	rows := `document.querySelectorAll("#messages tbody tr").length`
	do("peek the first page",
		chromedp.Click(chromedp.CSS("#peek-refresh")),
		poll(rows+` === 50 && document.querySelector("#messages tbody").textContent.includes("page-00")`),
		poll(`!document.querySelector("#peek-next").disabled`),
		shot("5-peek-page-1"),
	)
	do("peek the next page",
		chromedp.Click(chromedp.CSS("#peek-next")),
		poll(rows+` === 10 && document.querySelector("#messages tbody").textContent.includes("page-59")`),
		poll(`document.querySelector("#peek-next").disabled && document.querySelector("#peek-page").textContent === "page 2"`),
		shot("6-peek-page-2"),
	)
	if body := text("#messages tbody"); strings.Contains(body, "page-49") {
		t.Fatalf("the second page shows a message of the first: %q", body)
	}

	// Edit a property: the form sends what changed, the table shows it.
	do("edit a property",
		chromedp.SetValue(chromedp.CSS("#edit-MaxDeliveryCount"), "7"),
		chromedp.Click(chromedp.CSS("#edit")),
		poll(`document.querySelector("#action-result").textContent === "saved MaxDeliveryCount"`),
		poll(`[...document.querySelectorAll("#properties tr")].some((tr) => tr.textContent === "MaxDeliveryCount7")`),
		shot("7-edited"),
	)
	if q, err := ac.GetQueue(ctx, "invoices", nil); err != nil || q == nil || *q.MaxDeliveryCount != 7 {
		t.Fatalf("GetQueue after the console's edit: %+v, %v; want MaxDeliveryCount 7", q, err)
	}
	t.Logf("console screenshots: %s", shots)
}

// poll waits until expression is true in the page.
func poll(expression string) chromedp.Action[chromedp.Void] {
	p := chromedp.Poll[bool](expression, chromedp.WithPollingTimeout(30*time.Second))
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := p(ctx, tg)
		return err
	})
}

// artifactDir is where a test keeps what a person may want to look at
// after it ran: $QUORUMBUS_ARTIFACTS/<test> when set (CI keeps it), else
// a directory under the system's temporary directory that outlives the
// test. Never committed.
func artifactDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("QUORUMBUS_ARTIFACTS")
	if root == "" {
		root = filepath.Join(os.TempDir(), "quorumbus-artifacts")
	}
	dir := filepath.Join(root, fmt.Sprintf("%s-%d", t.Name(), time.Now().Unix()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
