package charttest

import (
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// checkCredits: the release's front-ends and gateways spend one budget of
// throttling credits (docs/security.md). Each is given the same
// -throttle-credits, throttleCredits, and joins the storage nodes'
// gossip under its pod's name, with the gossip key when there is one, to
// count the live front-ends and gateways and enforce its share: a
// gateway without -join would count only itself and take the whole
// gateways' part, a front-end given another budget would break the sum.
func checkCredits(t *testing.T, objs []Object, v effective) {
	sts := Find[appsv1.StatefulSet](objs, "StatefulSet", "")
	nodeC := sts.Spec.Template.Spec.Containers[0]
	spenders := 0
	for _, d := range All[appsv1.Deployment](objs) {
		c := d.Spec.Template.Spec.Containers[0]
		role := c.Args[0]
		if role != "frontend" && role != "gateway" {
			continue
		}
		spenders++
		if got := argValue(c.Args, "-throttle-credits"); got != strconv.Itoa(v.throttleCredits) {
			t.Errorf("%s -throttle-credits=%q, want throttleCredits %d", role, got, v.throttleCredits)
		}
		if got, want := argValue(c.Args, "-join"), argValue(nodeC.Args, "-join"); got == "" || got != want {
			t.Errorf("%s -join=%s, want the nodes' %s", role, got, want)
		}
		if argValue(c.Args, "-id") != "$(POD_NAME)" || containerPort(c, "gossip-tcp") != containerPort(nodeC, "gossip-tcp") ||
			containerPort(c, "gossip-udp") != containerPort(nodeC, "gossip-udp") {
			t.Errorf("%s gossip: -id=%s, ports %d/%d", role, argValue(c.Args, "-id"), containerPort(c, "gossip-tcp"), containerPort(c, "gossip-udp"))
		}
		if got, want := argValue(c.Args, "-gossip-advertise-addr"), "$(POD_IP):"+strconv.Itoa(int(containerPort(nodeC, "gossip-tcp"))); got != want {
			t.Errorf("%s -gossip-advertise-addr=%s, want %s", role, got, want)
		}
		keyFile := argValue(c.Args, "-gossip-key-file")
		if (keyFile != "") != (v.gossipSecret != "") {
			t.Errorf("%s -gossip-key-file=%q with gossip.keySecret %q", role, keyFile, v.gossipSecret)
		}
		if v.gossipSecret != "" && !mountsSecret(d.Spec.Template.Spec, c, v.gossipSecret, keyFile) {
			t.Errorf("%s does not mount the gossip key Secret %s", role, v.gossipSecret)
		}
	}
	want := 1
	if v.gateway {
		want++
	}
	if spenders != want {
		t.Errorf("%d front-end and gateway Deployments, want %d", spenders, want)
	}
}
