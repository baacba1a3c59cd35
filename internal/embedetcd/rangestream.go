package embedetcd

import (
	"context"
	"io"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// RangeStream answers etcd's streaming range (etcd 3.7's RangeStream RPC)
// in process: the member's handler sends its chunks through a channel to
// the caller's Recv. k8s.io/apiserver reads a whole prefix with it when it
// starts a watch list (an informer's first sync without a watch cache),
// and falls back to paging with Range when it is not implemented, as
// etcd's own in-process adapter does not: each page of Range counts every
// key after it, so the pages of a million keys cost time quadratic in
// their number. The stream counts once, at its end, and a page that
// continues a list whose last page it followed is not counted at all
// (rangecount.go).
//
// The chunks are the handler's own, unmarshalled nowhere: like Range's
// responses in process, they may share byte slices with etcd, and the
// caller must not modify them.
func (k inProcessKV) RangeStream(ctx context.Context, in *etcdserverpb.RangeRequest, _ ...grpc.CallOption) (etcdserverpb.KV_RangeStreamClient, error) {
	if err := k.refuse(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &rangePipe{ctx: ctx, chunks: make(chan *etcdserverpb.RangeStreamResponse, 1), done: make(chan struct{})}
	start, inRange, counted := k.counts.countedStart(in)
	var end *pageEnd
	if !counted {
		// etcd's handler changes the request as it goes: what the page's
		// end needs is read here.
		end = &pageEnd{counts: k.counts, end: string(in.RangeEnd), rev: in.Revision}
	}
	go func() {
		defer cancel()
		if counted {
			p.err = k.counts.streamCounted(ctx, k.member, in, start, inRange, func(resp *etcdserverpb.RangeResponse) error {
				return rangePipeServer{p: p}.Send(&etcdserverpb.RangeStreamResponse{RangeResponse: resp})
			})
		} else {
			p.err = k.server.RangeStream(in, rangePipeServer{p, end})
		}
		close(p.done)
	}()
	return rangePipeClient{p}, nil
}

// rangePipe carries one RangeStream's chunks from the member's handler to
// the caller. err is the handler's result, set before done is closed.
type rangePipe struct {
	ctx    context.Context
	chunks chan *etcdserverpb.RangeStreamResponse
	done   chan struct{}
	err    error
}

// rangePipeServer is the handler's end: Send waits for the caller to take
// the chunk, or for the caller's context to end. end, when set, keeps the
// count of the keys after the page (rangecount.go).
type rangePipeServer struct {
	p   *rangePipe
	end *pageEnd
}

func (s rangePipeServer) Send(resp *etcdserverpb.RangeStreamResponse) error {
	if err := s.p.ctx.Err(); err != nil {
		return err // the caller went away: send nothing more
	}
	if s.end != nil {
		s.end.saw(resp.RangeResponse)
	}
	resp = handOver(resp)
	select {
	case s.p.chunks <- resp:
		return nil
	case <-s.p.ctx.Done():
		return s.p.ctx.Err()
	}
}

// handOver gives the caller a chunk whose Kvs slice is its own. Both
// handlers read the chunk's keys after Send returns, to size the next
// chunk, and k8s.io/apiserver clears each entry of the slice as it decodes
// it; over gRPC the chunk is marshalled and the two never share it. The
// key-values themselves stay shared: neither side changes them.
func handOver(resp *etcdserverpb.RangeStreamResponse) *etcdserverpb.RangeStreamResponse {
	if resp.RangeResponse == nil || len(resp.RangeResponse.Kvs) == 0 {
		return resp
	}
	r := resp.RangeResponse
	return &etcdserverpb.RangeStreamResponse{RangeResponse: &etcdserverpb.RangeResponse{
		Header: r.Header, Kvs: slices.Clone(r.Kvs), More: r.More, Count: r.Count,
	}}
}

func (s rangePipeServer) Context() context.Context   { return s.p.ctx }
func (rangePipeServer) SetHeader(metadata.MD) error  { return nil }
func (rangePipeServer) SendHeader(metadata.MD) error { return nil }
func (rangePipeServer) SetTrailer(metadata.MD)       {}
func (rangePipeServer) SendMsg(any) error            { return errNotAStream }
func (rangePipeServer) RecvMsg(any) error            { return errNotAStream }
func (rangePipeClient) Header() (metadata.MD, error) { return nil, nil }
func (rangePipeClient) Trailer() metadata.MD         { return nil }
func (rangePipeClient) CloseSend() error             { return nil }
func (c rangePipeClient) Context() context.Context   { return c.p.ctx }
func (rangePipeClient) SendMsg(any) error            { return errNotAStream }
func (rangePipeClient) RecvMsg(any) error            { return errNotAStream }

// rangePipeClient is the caller's end: Recv returns the chunks in order,
// then io.EOF, or the handler's error.
type rangePipeClient struct{ p *rangePipe }

func (c rangePipeClient) Recv() (*etcdserverpb.RangeStreamResponse, error) {
	select {
	case resp := <-c.p.chunks:
		return resp, nil
	case <-c.p.done:
	}
	// The handler has returned; a chunk it sent may still wait.
	select {
	case resp := <-c.p.chunks:
		return resp, nil
	default:
	}
	if c.p.err != nil {
		return nil, c.p.err
	}
	return nil, io.EOF
}
