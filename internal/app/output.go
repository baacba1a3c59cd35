package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/template"

	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// machineFormats is what every -o takes besides a command's own tables, as
// kubectl spells them: the document as JSON, as YAML, or what a jsonpath or
// Go template makes of it.
const machineFormats = "json, yaml, jsonpath=TEMPLATE or go-template=TEMPLATE"

// isMachine reports whether format is one of machineFormats.
func isMachine(format string) bool {
	return format == "json" || format == "yaml" || strings.HasPrefix(format, "jsonpath=") || strings.HasPrefix(format, "go-template=")
}

// checkOutputFormat accepts a command's tables (the first is its default)
// and the machine formats, with a jsonpath template that parses.
func checkOutputFormat(format string, tables ...string) error {
	for _, t := range tables {
		if format == t {
			return nil
		}
	}
	if text, ok := strings.CutPrefix(format, "jsonpath="); ok {
		if err := jsonpath.New("output").Parse(text); err != nil {
			return fmt.Errorf("-o %s: %w", format, err)
		}
		return nil
	}
	if text, ok := strings.CutPrefix(format, "go-template="); ok {
		if _, err := template.New("output").Parse(text); err != nil {
			return fmt.Errorf("-o %s: %w", format, err)
		}
		return nil
	}
	if isMachine(format) {
		return nil
	}
	if len(tables) == 0 {
		return fmt.Errorf("unknown output format %q: use %s", format, machineFormats)
	}
	return fmt.Errorf("unknown output format %q: use %s or %s", format, strings.Join(tables, ", "), machineFormats)
}

// writeMachine writes v (a document with JSON field tags) in a machine
// format checkOutputFormat accepted.
func writeMachine(w io.Writer, format string, v any) error {
	var doc bytes.Buffer
	enc := json.NewEncoder(&doc)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	if format == "json" {
		_, err := w.Write(doc.Bytes())
		return err
	}
	if format == "yaml" {
		out, err := yaml.JSONToYAML(doc.Bytes())
		if err != nil {
			return fmt.Errorf("encode output as YAML: %w", err)
		}
		_, err = w.Write(out)
		return err
	}
	// Templates see the document as JSON decodes it, with its JSON names.
	var data any
	if err := json.Unmarshal(doc.Bytes(), &data); err != nil {
		return fmt.Errorf("decode output for -o %s: %w", format, err)
	}
	if text, ok := strings.CutPrefix(format, "jsonpath="); ok {
		jp := jsonpath.New("output")
		if err := jp.Parse(text); err != nil {
			return fmt.Errorf("-o %s: %w", format, err)
		}
		if err := jp.Execute(w, data); err != nil {
			return fmt.Errorf("-o %s: %w", format, err)
		}
		_, err := fmt.Fprintln(w)
		return err
	}
	if text, ok := strings.CutPrefix(format, "go-template="); ok {
		tmpl, err := template.New("output").Parse(text)
		if err != nil {
			return fmt.Errorf("-o %s: %w", format, err)
		}
		if err := tmpl.Execute(w, data); err != nil {
			return fmt.Errorf("-o %s: %w", format, err)
		}
		return nil
	}
	return fmt.Errorf("unknown output format %q: use %s", format, machineFormats)
}
