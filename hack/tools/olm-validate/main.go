// Command olm-validate checks an operator bundle directory with the
// operator-framework's own validation library (github.com/operator-framework/api),
// the library behind `operator-sdk bundle validate`.
//
// Usage: olm-validate [-k8s-version 1.33] [-suite default|operatorhub] BUNDLE_DIR
//
// Suites:
//
//	default      CSV, CRD and bundle structure (what OLM itself needs)
//	operatorhub  default + OperatorHub metadata, categories, capabilities,
//	             good practices, bundle objects and removed APIs
//
// The library's MultipleArchitecturesValidator is left out on purpose: it
// pulls every image the CSV names (docker/podman pull), and this tool must
// work offline and never touch a registry.
//
// Every error and warning is printed, one per line, with its manifest; the
// exit status is 1 when there is at least one error, 2 on a usage or loading
// problem and 0 otherwise (warnings alone do not fail).
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
	"github.com/operator-framework/api/pkg/validation/errors"
	validator "github.com/operator-framework/api/pkg/validation/interfaces"
)

func validators(suite string) (validator.Validators, bool) {
	base := validator.Validators{}
	base = append(base, validation.DefaultBundleValidators...)
	hub := base.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCategoriesValidator,
		validation.StandardCapabilitiesValidator,
		validation.GoodPracticesValidator,
		validation.ObjectValidator,
		validation.AlphaDeprecatedAPIsValidator,
	)
	switch suite {
	case "default":
		return base, true
	case "operatorhub":
		return hub, true
	}
	return nil, false
}

func main() {
	k8sVersion := flag.String("k8s-version", "", "Kubernetes minor version to check removed APIs against (for example 1.33)")
	suite := flag.String("suite", "operatorhub", "validator suite: default or operatorhub")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s [flags] BUNDLE_DIR\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	vals, ok := validators(*suite)
	if !ok {
		fmt.Fprintf(os.Stderr, "olm-validate: unknown suite %q (want default or operatorhub)\n", *suite)
		os.Exit(2)
	}
	dir := flag.Arg(0)
	bundle, err := manifests.GetBundleFromDir(dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "olm-validate: cannot load the bundle in %s: %v\n", dir, err)
		os.Exit(2)
	}
	if bundle == nil || bundle.CSV == nil {
		fmt.Fprintf(os.Stderr, "olm-validate: %s holds no ClusterServiceVersion\n", dir)
		os.Exit(2)
	}

	objs := bundle.ObjectsToValidate()
	if *k8sVersion != "" {
		objs = append(objs, map[string]string{"k8s-version": *k8sVersion})
	}
	results := vals.Validate(objs...)

	var errs, warns []string
	for _, r := range results {
		for _, e := range r.Errors {
			errs = append(errs, line(r, e))
		}
		for _, w := range r.Warnings {
			warns = append(warns, line(r, w))
		}
	}
	sort.Strings(errs)
	sort.Strings(warns)
	for _, l := range errs {
		fmt.Println("ERROR " + l)
	}
	for _, l := range warns {
		fmt.Println("WARN  " + l)
	}
	fmt.Printf("olm-validate: bundle %s (CSV %s, package %s, channels %v, suite %s): %d error(s), %d warning(s)\n",
		dir, bundle.CSV.GetName(), bundle.Package, bundle.Channels, *suite, len(errs), len(warns))
	if len(errs) > 0 {
		os.Exit(1)
	}
}

func line(r errors.ManifestResult, e errors.Error) string {
	if r.Name == "" {
		return e.Error()
	}
	return fmt.Sprintf("[%s] %s", r.Name, e.Error())
}
