// Package charttest renders the quorumbus chart (deploy/helm/quorumbus)
// the way `helm template` and `helm install` do, with Helm's own Go
// packages, decodes every rendered object strictly into its Kubernetes
// API type, and runs the chart's pods as local processes. It has no
// Kubernetes cluster to talk to: what it proves is the chart's syntax,
// values, objects and wiring, not a scheduler's or a kubelet's behaviour.
package charttest

import (
	"fmt"
	"io"
	"path/filepath"
	"runtime"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
)

// ChartDir is the chart's directory in this checkout.
func ChartDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "quorumbus")
}

// Release names what `helm template NAME -n NAMESPACE` gets.
type Release struct {
	Name      string
	Namespace string
}

// KubeVersion is the Kubernetes version the chart is rendered for; the
// chart's kubeVersion constraint is checked against it.
const KubeVersion = "v1.31.0"

// Template renders the chart with values as `helm template` does: values
// merged over values.yaml, checked against values.schema.json, the
// templates' own checks (fail), and the manifest of every object,
// hooks included.
func Template(rel Release, values map[string]any) (string, error) {
	ch, err := loader.Load(ChartDir())
	if err != nil {
		return "", err
	}
	return TemplateChart(ch, rel, values)
}

// TemplateChart is Template for a chart already loaded.
func TemplateChart(ch *chart.Chart, rel Release, values map[string]any) (string, error) {
	cfg := &action.Configuration{
		KubeClient: &kubefake.PrintingKubeClient{Out: io.Discard},
		Releases:   storage.Init(driver.NewMemory()),
		Log:        func(string, ...any) {},
	}
	install := action.NewInstall(cfg)
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.IncludeCRDs = true
	install.ReleaseName, install.Namespace = rel.Name, rel.Namespace
	kv, err := chartutil.ParseKubeVersion(KubeVersion)
	if err != nil {
		return "", err
	}
	install.KubeVersion = kv
	if values == nil {
		values = map[string]any{}
	}
	r, err := install.Run(ch, values)
	if err != nil {
		return "", err
	}
	manifest := r.Manifest
	for _, h := range r.Hooks {
		manifest += "\n---\n# Source: " + h.Path + "\n" + h.Manifest
	}
	return manifest, nil
}

// Lint runs `helm lint --strict` with values and returns its messages of
// warning severity or worse.
func Lint(rel Release, values map[string]any) ([]support.Message, error) {
	l := lint.AllWithKubeVersion(ChartDir(), values, rel.Namespace, &chartutil.KubeVersion{Version: KubeVersion, Major: "1", Minor: "31"})
	var bad []support.Message
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			bad = append(bad, m)
		}
	}
	if l.HighestSeverity >= support.ErrorSev && len(bad) == 0 {
		return nil, fmt.Errorf("lint failed without a message")
	}
	return bad, nil
}
