package frontend_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	goamqp "github.com/Azure/go-amqp"
	"google.golang.org/grpc/test/bufconn"

	"github.com/quorumbus/quorumbus/frontend"
)

// A front-end served over in-memory connections, so that a test can run
// it, its clients and memBackend inside a testing/synctest bubble, where
// the time package's clock is virtual. The front-end's timers (a claim's
// expiry, an accept-next's deadline, a long-poll's wait) then fire at
// exact virtual instants, and minutes of them pass at once. Over TCP they
// could not: a goroutine waiting on a socket is not durably blocked, so
// the bubble's clock would never move.

// memHost is the host name in-memory clients announce in their AMQP open
// frame; token audiences name it.
const memHost = "sb.test"

// memConnBuffer is each direction's buffer of an in-memory connection,
// as a socket's would be: a writer does not wait for its reader frame by
// frame.
const memConnBuffer = 1 << 20

// memDrain outlasts any call the front-end makes to its Backend (at most
// a receive's or an accept-next's wait plus sendTimeout).
const memDrain = 10 * time.Minute

// memFrontend is a front-end on an in-memory listener.
type memFrontend struct {
	srv *frontend.Server
	ln  *bufconn.Listener
}

// serveInMemory starts a front-end of cfg on an in-memory listener, shut
// down when the test ends. Called inside a synctest bubble, everything it
// starts belongs to the bubble. A bubble must end without goroutines
// left, so the shutdown waits for Serve to return and then lets virtual
// time run on (memDrain): calls still under way end, such as a
// partition's late answer to an accept-next that the front-end answered
// already, and a test that fails half way reports its failure rather
// than a deadlock. A goroutine that never ends still does.
func serveInMemory(t *testing.T, cfg frontend.Config) *memFrontend {
	t.Helper()
	srv, err := frontend.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln := bufconn.Listen(memConnBuffer)
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-served
		time.Sleep(memDrain)
	})
	return &memFrontend{srv: srv, ln: ln}
}

// dialNet opens an in-memory connection to the front-end.
func (f *memFrontend) dialNet(ctx context.Context, _ azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
	return f.ln.DialContext(ctx)
}

// dial opens a go-amqp connection (SASL ANONYMOUS, as the SDKs do, unless
// opts say otherwise), closed when the test ends.
func (f *memFrontend) dial(t *testing.T, ctx context.Context, opts *goamqp.ConnOptions) *goamqp.Conn {
	t.Helper()
	o := goamqp.ConnOptions{SASLType: goamqp.SASLTypeAnonymous()}
	if opts != nil {
		o = *opts
	}
	if o.HostName == "" {
		o.HostName = memHost
	}
	nc, err := f.dialNet(ctx, azservicebus.NewWebSocketConnArgs{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := goamqp.NewConn(ctx, nc, &o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// sdkClient is an official Go SDK client of the emulator's rule whose
// connections are in-memory ones (the SDK's hook for web sockets hands it
// any net.Conn), closed when the test ends.
func (f *memFrontend) sdkClient(t *testing.T) *azservicebus.Client {
	t.Helper()
	return f.sdkClientOf(t, "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE")
}

// sdkClientOf is an in-memory SDK client with the credentials of a
// connection string: a rule's name and key, or a SharedAccessSignature.
func (f *memFrontend) sdkClientOf(t *testing.T, creds string) *azservicebus.Client {
	t.Helper()
	cs := fmt.Sprintf("Endpoint=sb://%s;%s;UseDevelopmentEmulator=true;", memHost, creds)
	c, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{NewWebSocketConn: f.dialNet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
