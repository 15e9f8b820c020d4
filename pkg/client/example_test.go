package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/sandgate/sandgate/pkg/client"
)

// gatewayURL and token stand for what a program reads from its configuration; the examples
// run against the real gateway TestMain starts.
func gatewayURL() string { return shared.URL }
func token() string      { return shared.Token("example-user") }

// Run a command in a new session and read its result. A program that exits non-zero is a
// result, not an error.
func Example() {
	ctx := context.Background()
	c, err := client.New(gatewayURL(), client.WithToken(token()))
	if err != nil {
		panic(err)
	}
	s, err := c.CreateSession(ctx, client.CreateSessionRequest{Name: ptr("demo")})
	if err != nil {
		panic(err)
	}
	defer c.DeleteSession(ctx, s.Id)

	x, err := c.RunCommand(ctx, s.Id, client.CommandRequest{Command: "echo hello; exit 3"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q exit %d\n", x.Result.Stdout, *x.Result.ExitCode)
	// Output: "hello\n" exit 3
}

// Stream a command's output as it is produced; the last event is the result.
func ExampleClient_StreamCommand() {
	ctx := context.Background()
	c, _ := client.New(gatewayURL(), client.WithToken(token()))
	s, _ := c.CreateSession(ctx, client.CreateSessionRequest{})
	defer c.DeleteSession(ctx, s.Id)

	st, err := c.StreamCommand(ctx, s.Id, client.CommandRequest{Command: "for i in 1 2 3; do echo step $i; sleep 0.1; done"})
	if err != nil {
		panic(err)
	}
	res, err := st.Wait(os.Stdout, os.Stderr) // output is written as it arrives
	if err != nil {
		panic(err)
	}
	fmt.Println("exit", *res.ExitCode)
	// Output:
	// step 1
	// step 2
	// step 3
	// exit 0
}

// Files move as raw bytes, streamed both ways.
func ExampleClient_Upload() {
	ctx := context.Background()
	c, _ := client.New(gatewayURL(), client.WithToken(token()))
	s, _ := c.CreateSession(ctx, client.CreateSessionRequest{})
	defer c.DeleteSession(ctx, s.Id)

	data := []byte{0xff, 0x00, 0xfe, 'x'} // not UTF-8: stored as sent
	w, err := c.Upload(ctx, s.Id, "in/data.bin", bytes.NewReader(data), int64(len(data)))
	if err != nil {
		panic(err)
	}
	var back bytes.Buffer
	if _, err := c.Download(ctx, s.Id, "in/data.bin", &back); err != nil {
		panic(err)
	}
	fmt.Println(w.Size, bytes.Equal(back.Bytes(), data))
	// Output: 4 true
}

// Code keeps its state between calls on a stateful profile.
func ExampleClient_RunCode() {
	ctx := context.Background()
	c, _ := client.New(gatewayURL(), client.WithToken(token()))
	s, _ := c.CreateSession(ctx, client.CreateSessionRequest{})
	defer c.DeleteSession(ctx, s.Id)

	_, _ = c.RunCode(ctx, s.Id, client.CodeRequest{Code: "answer = 6*7"})
	x, _ := c.RunCode(ctx, s.Id, client.CodeRequest{Code: "print(answer)"})
	fmt.Print(x.Result.Stdout)
	// Output: 42
}

// A run that outlives wait_s becomes a task: wait for it, or cancel it.
func ExampleClient_WaitTask() {
	ctx := context.Background()
	c, _ := client.New(gatewayURL(), client.WithToken(token()))
	s, _ := c.CreateSession(ctx, client.CreateSessionRequest{})
	defer c.DeleteSession(ctx, s.Id)

	x, _ := c.RunCommand(ctx, s.Id, client.CommandRequest{Command: "sleep 0.5; echo finished", WaitS: ptr(0.0)})
	t, err := c.WaitTask(ctx, x.Task.Id)
	if err != nil {
		panic(err)
	}
	fmt.Print(t.Status, " ", t.Result.Stdout)
	// Output: succeeded finished
}

// Standard input streams from an io.Reader into a running program.
func ExampleClient_WriteStdin() {
	ctx := context.Background()
	c, _ := client.New(gatewayURL(), client.WithToken(token()))
	s, _ := c.CreateSession(ctx, client.CreateSessionRequest{})
	defer c.DeleteSession(ctx, s.Id)

	x, _ := c.RunCommand(ctx, s.Id, client.CommandRequest{Command: "sort", StdinOpen: ptr(true), WaitS: ptr(0.0)})
	if _, err := c.WriteStdin(ctx, x.Task.Id, strings.NewReader("pear\napple\n"), true); err != nil {
		panic(err)
	}
	t, _ := c.WaitTask(ctx, x.Task.Id)
	fmt.Print(t.Result.Stdout)
	// Output:
	// apple
	// pear
}

// Refused requests are *client.Error values carrying the gateway's problem.
func ExampleError() {
	ctx := context.Background()
	c, _ := client.New(gatewayURL(), client.WithToken(token()))
	_, err := c.Session(ctx, "0123456789abcdef0123456789abcdef")
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Kind(), client.IsKind(err, client.KindNotFound))
	}
	// Output: 404 not-found true
}

func ptr[T any](v T) *T { return &v }
