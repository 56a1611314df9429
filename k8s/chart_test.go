package manifests

import (
	"fmt"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
)

// The Helm chart, rendered through the Helm SDK exactly as `helm template`
// renders it (a client-only dry-run install), with the release name and
// namespace that make its object names those of the overlays.
const (
	chartDir         = "../deploy/helm/shardlimiter"
	releaseName      = "shardlimiter"
	releaseNamespace = "shardlimiter"
)

// chartKubeVersion stands for the cluster: `helm template` built from source
// reports Kubernetes 1.20 unless told otherwise, below the chart's
// kubeVersion constraint.
var chartKubeVersion = chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}

// chartValues are the command-line values of one rendering: -f files
// (relative to this directory) and --set expressions.
type chartValues struct {
	files []string
	set   []string
}

func (v chartValues) merge() (map[string]any, error) {
	opts := values.Options{ValueFiles: v.files, Values: v.set}
	return opts.MergeValues(getter.Providers{})
}

func loadChart(dir string) (*chart.Chart, error) {
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	return chrt, nil
}

// helmTemplate renders the chart at dir with v, as `helm template
// shardlimiter dir --namespace shardlimiter -f … --set …` does. Values that
// the schema refuses or a template that fails are errors.
func helmTemplate(dir string, v chartValues) ([]byte, error) {
	chrt, err := loadChart(dir)
	if err != nil {
		return nil, err
	}
	vals, err := v.merge()
	if err != nil {
		return nil, err
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.DryRunOption = true, "true"
	inst.ClientOnly = true
	inst.Replace = true
	inst.ReleaseName = releaseName
	inst.Namespace = releaseNamespace
	inst.KubeVersion = &chartKubeVersion
	rel, err := inst.Run(chrt, vals)
	if err != nil {
		return nil, err
	}
	return []byte(rel.Manifest), nil
}

