"""Makes the multi-speaker "calls" of tests/fixtures/speakers/ from AMI meeting excerpts (run once,
by hand; needs numpy and soundfile).

Source: the 30-second AMI Meeting Corpus excerpts (Mix-Headset, CC BY 4.0) with their reference
speaker turns (RTTM) in pyannote.audio's test data (`tests/data/*.wav`, `debug.*.rttm`, MIT).

Second source: LibriSpeech test-other utterances (read audiobooks from LibriVox, CC BY 4.0), 10
speakers with 10 utterances each, as kept in Resemblyzer's repository
(`audio_data/librispeech_test-other/<speaker>/*.flac`, Apache-2.0). Each call takes utterances of
2, 3 or 4 readers in turn (at most LS_MAX_S of each), one utterance a turn; the "next call" has
two readers of the earlier calls again (other utterances) and a new one.

    python3 tests/speakers/make_calls.py PYANNOTE_TESTS_DATA_DIR RESEMBLYZER_TEST_OTHER_DIR OUT_DIR

Per call, the excerpts are read in order; from each speaker turn of the reference, the parts
where that speaker alone speaks (no one else's turn overlaps) and that last at least MIN_S are
kept, and laid end to end with GAP_S of silence between them. The reference turns of the new
file are written beside it (calls.json). Overlapping speech is left out on purpose: the labels
are checked turn by turn, and a turn where two people speak has no single right answer.
"""

import json
import os
import sys
import unicodedata

import numpy as np
import soundfile as sf

MIN_S = 1.0
# Another speaker's turn shorter than this ("mm-hmm") does not interrupt: the part keeps its
# dominant speaker, as in a call.
BACKCHANNEL_S = 0.6
GAP_S = 1.0
CALLS = {
    # name: excerpts (AMI speakers in them)
    "ami-2-speakers": ["dev00", "dev01"],  # MEE009 MEE012
    "ami-3-speakers": ["trn00", "trn03"],  # MEE067 MEE068 MÉO069
    "ami-3-speakers-b": ["trn07", "trn08"],  # FEE087 FEE088 MEO086 (MEE089 only overlaps)
    "ami-3-speakers-c": ["tst00", "tst01"],  # FEO070 FEO072 MEE073 (MEE071 only overlaps)
}


def nfc(s):
    return unicodedata.normalize("NFC", s)


LS_MAX_S = 4.0
LS_CALLS = {
    # name: (readers, utterances of each, first utterance index)
    "librispeech-2-speakers": (["1688", "1998"], 5, 0),
    "librispeech-3-speakers": (["2033", "2414", "2609"], 4, 0),
    "librispeech-4-speakers": (["3005", "3080", "3331", "367"], 3, 0),
    "librispeech-next-call": (["1998", "533", "2033"], 3, 6),
}
# The order readers speak in, as indexes into a call's readers (a conversation, not a round).
LS_ORDER = [0, 1, 0, 1, 2, 0, 3, 1, 2, 3, 0, 2, 1, 3, 2, 0, 1, 3, 2, 1, 0, 3, 2, 1]


def librispeech(root, out, meta):
    gap = np.zeros(int(GAP_S * 16000), dtype=np.float32)
    for call, (readers, each, first) in LS_CALLS.items():
        files = {r: sorted(os.listdir(os.path.join(root, r)))[first:first + each] for r in readers}
        used = {r: 0 for r in readers}
        pieces, turns, t = [gap], [], GAP_S
        for i in LS_ORDER:
            if i >= len(readers) or used[readers[i]] >= each:
                continue
            r = readers[i]
            name = files[r][used[r]]
            used[r] += 1
            x, sr = sf.read(os.path.join(root, r, name), dtype="float32")
            assert sr == 16000 and x.ndim == 1
            x = x[: int(LS_MAX_S * sr)]
            pieces += [x, gap]
            turns.append({"start_ms": round(t * 1000), "end_ms": round((t + len(x) / sr) * 1000),
                          "speaker": r, "from": name})
            t += (len(x) + len(gap)) / sr
        assert all(used[r] == each for r in readers), (call, used)
        audio = np.concatenate(pieces)
        sf.write(os.path.join(out, call + ".wav"), audio, 16000, subtype="PCM_16")
        meta[call] = {"file": call + ".wav", "excerpts": [f"LibriSpeech test-other {r}" for r in readers],
                      "speakers": sorted(readers), "turns": turns}
        print(call, f"{len(audio) / 16000:.1f} s", len(turns), "turns", readers)


def rttm(data):
    turns = {}
    for name in os.listdir(data):
        if name.endswith(".rttm"):
            for line in open(os.path.join(data, name), encoding="utf-8"):
                f = line.split()
                turns.setdefault(nfc(f[1]), []).append((float(f[3]), float(f[3]) + float(f[4]), f[7]))
    return turns


def alone(turns):
    """(start, end, speaker) parts where one speaker alone is speaking."""
    out = []
    for s, e, who in turns:
        cuts = [(s, e)]
        for s2, e2, w2 in turns:
            if w2 == who or e2 - s2 < BACKCHANNEL_S:
                continue
            nxt = []
            for a, b in cuts:
                if e2 <= a or s2 >= b:
                    nxt.append((a, b))
                    continue
                if s2 > a:
                    nxt.append((a, s2))
                if e2 < b:
                    nxt.append((e2, b))
            cuts = nxt
        out += [(a, b, who) for a, b in cuts if b - a >= MIN_S]
    return sorted(out)


def main(data, ls_root, out):
    os.makedirs(out, exist_ok=True)
    ref = rttm(data)
    uri = {nfc(n).replace("ñ", "n")[:-4]: nfc(n) for n in os.listdir(data) if n.endswith(".wav")}
    files = {nfc(n): n for n in os.listdir(data)}
    meta = {}
    for call, parts in CALLS.items():
        pieces, turns, t = [], [], 0.0
        gap = np.zeros(int(GAP_S * 16000), dtype=np.float32)
        for p in parts:
            wav, sr = sf.read(os.path.join(data, files[uri[p]]), dtype="float32")
            assert sr == 16000 and wav.ndim == 1
            key = p
            for s, e, who in alone(ref[p]):
                x = wav[int(s * sr): int(e * sr)]
                pieces += [x, gap]
                turns.append({"start_ms": round(t * 1000), "end_ms": round((t + len(x) / sr) * 1000),
                              "speaker": who, "from": f"{key} {s:.3f}-{e:.3f}"})
                t += (len(x) + len(gap)) / sr
        audio = np.concatenate([gap] + pieces)
        for tr in turns:
            tr["start_ms"] += round(GAP_S * 1000)
            tr["end_ms"] += round(GAP_S * 1000)
        sf.write(os.path.join(out, call + ".wav"), audio, 16000, subtype="PCM_16")
        meta[call] = {"file": call + ".wav", "excerpts": parts,
                      "speakers": sorted({tr["speaker"] for tr in turns}), "turns": turns}
        print(call, f"{len(audio) / 16000:.1f} s", len(turns), "turns", meta[call]["speakers"])
    librispeech(ls_root, out, meta)
    with open(os.path.join(out, "calls.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
