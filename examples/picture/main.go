// Command picture replays traffic patterns through every sluice algorithm
// and draws what each admits against what was offered, per 100 ms slice: as
// a chart in the terminal, or as an SVG document.
//
//	go run ./examples/picture                       # terminal chart, seed traffic
//	go run ./examples/picture -pattern flood
//	go run ./examples/picture -pattern both -svg docs/algorithms.svg
//
// The limit is the seed articles' 1000 requests per 3 s, with each
// algorithm's default burst. Two patterns are replayed: the seed traffic,
// 10, 10, 980, 900, 100 and 0 requests in six consecutive seconds (against
// which a fixed window admits 1980 requests within 3 s), and a steady flood
// at twice the limit's rate for 10 s. Requests are spread evenly within each
// second; each is one Take of cost 1 on a memorystore.Store whose clock is
// set to the request's arrival, so the output is exact and reproducible.
// LeakyBucket's admitted requests are counted when they are served, after
// the delay the store gives them.
//
// docs/algorithms.svg is this command's output; a test fails when it is not
// what the command draws now.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "picture:", err)
		}
		os.Exit(2)
	}
}

// run parses args, replays the chosen patterns and writes the terminal chart
// to stdout, or the SVG to the file -svg names.
func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("picture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	svgFile := fs.String("svg", "", "write the SVG to `file` instead of printing the terminal chart")
	which := fs.String("pattern", "seed", "traffic to replay: seed, flood or both")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	scenes, err := scenesFor(*which)
	if err != nil {
		return err
	}
	if *svgFile == "" {
		for i, sc := range scenes {
			if i > 0 {
				if _, err := io.WriteString(stdout, "\n\n"); err != nil {
					return err
				}
			}
			if err := writeText(stdout, sc); err != nil {
				return err
			}
		}
		return nil
	}
	var buf bytes.Buffer
	if err := writeSVG(&buf, scenes); err != nil {
		return err
	}
	if err := os.WriteFile(*svgFile, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing the SVG: %w", err)
	}
	return nil
}

// scenesFor replays the patterns that -pattern names.
func scenesFor(which string) ([]scene, error) {
	var chosen []pattern
	switch which {
	case "seed":
		chosen = patterns[:1]
	case "flood":
		chosen = patterns[1:2]
	case "both":
		chosen = patterns
	default:
		return nil, fmt.Errorf("-pattern %q: want seed, flood or both", which)
	}
	var scenes []scene
	for _, p := range chosen {
		sc, err := build(p)
		if err != nil {
			return nil, err
		}
		scenes = append(scenes, sc)
	}
	return scenes, nil
}
