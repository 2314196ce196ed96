"""The one framing of Earshot's speech front ends: 16 kHz audio, a 25-ms window in a 512-point FFT, a 10-ms hop.

MFCC, log-mel and the linear spectrogram (models/frontends.py) and the codebook inverter's target
(models/inverter.py) share it, so frame t of each covers the same audio; the speech_embedding model
(models/speech_embedding.py) reads the same rate and hop. torch-free: the trainers' settings and the corpus
builders import it without torch.
"""

SAMPLE_RATE = 16000  # Hz: every speech model's input rate
N_FFT = 512
WIN_LENGTH = 400  # samples: 25 ms
HOP_LENGTH = 160  # samples: 10 ms
