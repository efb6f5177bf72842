package testserver

import (
	"bufio"
	"io"
)

func ioReadFull(br *bufio.Reader, buf []byte) (int, error) { return io.ReadFull(br, buf) }
